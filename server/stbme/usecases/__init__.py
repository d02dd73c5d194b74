"""What the product does, one concept per module, with typed arguments and plain results: chats and sync,
memories, recall, embedding and reindex, import/export, processing and the job worker, settings, health,
and the DNA layer's use cases. The HTTP layer (api/) and the CLI (cli/) both call these; services.py
builds them once and hands each only what it needs."""
