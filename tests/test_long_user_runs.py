"""A chat with a long run of user messages and no reply (an imported two-person chat) is still processed:
the run is cut into batches of its own instead of waiting for a reply that never comes in the window."""

from conftest import full_sync, settle
from stbme.pipeline.batch import MAX_BATCH_MESSAGES


async def test_a_run_of_user_messages_longer_than_the_batch_window_is_processed(sidecar):
    run = MAX_BATCH_MESSAGES * 4 + 30
    chat = [{"role": "user", "name": "Akib", "text": f"Another thing I did today, number {i}."} for i in range(run)]
    chat.append({"role": "assistant", "name": "Fahim", "text": "Sounds like a long day."})
    await full_sync(sidecar, "c", chat)
    status = await settle(sidecar, "c")
    assert status["processed_upto"] == run
