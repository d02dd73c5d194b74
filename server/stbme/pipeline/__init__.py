"""The write path (sync, heuristic memories, job queue) and the read path (recall, rendering)."""
