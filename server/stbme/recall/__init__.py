"""The read path: from the user's new input to the memory block injected before a generation
(read_path.py runs it stage by stage; the write path is pipeline/)."""
