"""The Authority bridge: the storage protocol of the original ST-BME extension's optional "Authority" server
plugin (sessions, a whitelisted SQL store, "Trivium" vector collections, private files, jobs), served by
the sidecar so unmodified ST-BME keeps its graph and vectors here. See docs/authority.md."""

from .service import AuthorityService

__all__ = ["AuthorityService"]
