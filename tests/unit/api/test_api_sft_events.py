"""SFT warm-start progress reaches API clients as `sft` stream events (a kind the API
did not know would fail the stream's validation)."""

from __future__ import annotations

import math

from artfleet.v1 import common_pb2 as pb
from artfleet_api.mapping import event_out


def test_sft_batch_and_done_events_stream() -> None:
    batch = pb.ProgressEvent(
        seq=3,
        kind=pb.EVENT_KIND_SFT,
        sft=pb.SftProgress(epoch=1, epochs=2, batch=1, batches=4, loss=2.5, learning_rate=5e-5),
    )
    out = event_out(batch)
    assert out.kind == "sft" and out.sft is not None
    assert (out.sft.epoch, out.sft.batch, out.sft.loss, out.sft.done) == (1, 1, 2.5, False)
    assert '"kind":"sft"' in out.model_dump_json()
    done = pb.ProgressEvent(
        seq=4,
        kind=pb.EVENT_KIND_SFT,
        sft=pb.SftProgress(done=True, checkpoint_step=1, epoch_losses=[2.5, 1.0], loss=math.nan),
    )
    out = event_out(done)
    assert out.sft is not None and out.sft.done and out.sft.checkpoint_step == 1
    assert out.sft.epoch_losses == [2.5, 1.0] and out.sft.loss is None  # NaN is no JSON
