"""Token usage of every LLM call, per task, counted with tiktoken (cl100k_base)."""

from __future__ import annotations

import dataclasses
import threading

from ..tokens import count_tokens


def count_messages(messages: list[dict]) -> int:
    """Prompt tokens of a chat request: content plus ~4 tokens of framing per message."""
    return sum(count_tokens(str(m.get("content") or "")) + 4 for m in messages) + 2


@dataclasses.dataclass
class TaskUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0


class UsageMeter:
    """Counts calls and tokens per task (extract, dedupe, evolve, summary, ...) since start."""

    def __init__(self):
        self._tasks: dict[str, TaskUsage] = {}
        # What the pipeline left out of parsed answers, per task and reason: an answer can be valid JSON and
        # still follow no schema (a real 135M model: 7 extractions, 0 memories, issue 20 item 9).
        self._dropped: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def add(self, task: str, prompt_tokens: int, completion_tokens: int, *, failed: bool = False) -> None:
        with self._lock:
            u = self._tasks.setdefault(task, TaskUsage())
            u.calls += 1
            u.prompt_tokens += prompt_tokens
            u.completion_tokens += completion_tokens
            u.failures += int(failed)

    def drop(self, task: str, reasons: dict[str, int]) -> None:
        """Count the items (operations, links, decisions) of a task's answers left out, by reason."""
        with self._lock:
            counts = self._dropped.setdefault(task, {})
            for reason, n in reasons.items():
                if n:
                    counts[reason] = counts.get(reason, 0) + n

    def snapshot(self) -> dict:
        with self._lock:
            tasks = {k: dataclasses.asdict(v) for k, v in sorted(self._tasks.items())}
            dropped = {k: dict(sorted(v.items())) for k, v in sorted(self._dropped.items()) if v}
        total = TaskUsage()
        for v in tasks.values():
            total.calls += v["calls"]
            total.prompt_tokens += v["prompt_tokens"]
            total.completion_tokens += v["completion_tokens"]
            total.failures += v["failures"]
        return {"total": dataclasses.asdict(total), "tasks": tasks, "dropped": dropped}

    def reset(self) -> None:
        with self._lock:
            self._tasks.clear()
            self._dropped.clear()
