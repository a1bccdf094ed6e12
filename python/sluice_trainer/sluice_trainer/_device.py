"""Batches onto an accelerator: pinned host buffers and a copy stream.

A batch's tensors are views of memory sluice wrote (shared memory or the pipe's
buffer), valid until the batch is acknowledged. To put them on a CUDA device
without stalling the step, each column is first copied into a page-locked
(pinned) host buffer, a plain memory copy, and then sent to the device on a
stream of its own with `non_blocking=True`. The training stream waits for that
copy only where it first uses the tensors; meanwhile the GPU still runs the
kernels the previous step queued. So the next batch's copy overlaps the
current step, and nothing is read ahead from sluice: a batch is acknowledged,
as always, when the loop asks for the next one.

Two sets of pinned buffers take turns, so filling one never overwrites the
other while its copy may still be in flight; a set is reused only once its
copy has finished (a CUDA event).
"""

from ._protocol import SluiceError, _import_torch


class DeviceFeeder:
    """Moves dicts of CPU tensors onto `device` (see the module's doc)."""

    #: Pinned buffer sets that take turns.
    SETS = 2

    def __init__(self, device):
        torch = _import_torch("device=...")
        self._torch = torch
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise SluiceError(f"device={device!r}: {e}") from None
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            if not torch.cuda.is_available():
                raise SluiceError(
                    f"device={device!r}: this torch sees no CUDA device "
                    "(torch.cuda.is_available() is False)")
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            self._stream = torch.cuda.Stream(device=self.device)
            self._pinned = [dict() for _ in range(self.SETS)]
            self._done = [None] * self.SETS
            self._turn = 0

    def __call__(self, tensors):
        """`tensors` on the device; on CUDA, through pinned buffers on the copy stream."""
        if not self.cuda:
            return {name: t.to(self.device) for name, t in tensors.items()}
        torch = self._torch
        turn = self._turn
        self._turn = (turn + 1) % self.SETS
        if self._done[turn] is not None:
            # The copy that last used this set has finished before it is refilled.
            self._done[turn].synchronize()
        pinned = self._pinned[turn]
        out = {}
        with torch.cuda.stream(self._stream):
            for name, tensor in tensors.items():
                if tensor.device.type != "cpu":
                    out[name] = tensor.to(self.device, non_blocking=True)
                    continue
                staged = self._staging(pinned, name, tensor)
                staged.copy_(tensor)
                out[name] = staged.to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._stream)
        self._done[turn] = done
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self._stream)
        for tensor in out.values():
            # Allocated on the copy stream, used on the training stream: the caching
            # allocator must not hand the memory out again before that use is over.
            tensor.record_stream(current)
        return out

    def _staging(self, pinned, name, tensor):
        """A pinned buffer of `tensor`'s dtype and shape, grown when a batch needs more."""
        numel = tensor.numel()
        buffer = pinned.get(name)
        if buffer is None or buffer.dtype != tensor.dtype or buffer.numel() < numel:
            buffer = self._torch.empty(max(numel, 1), dtype=tensor.dtype, pin_memory=True)
            pinned[name] = buffer
        return buffer[:numel].view(tensor.shape)
