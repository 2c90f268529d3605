"""The simulated training program: a small MLP trained on one GPU, step by step.

Every scenario runs this same loop; a :class:`Pathologies` switches on the one thing that
goes wrong. The user code lives in a fake file, ``/synthetic/train.py``, whose functions
(and so the lines the profiler's ``python_function`` frames name) are listed in
:data:`LINES` — findings are expected to point at them.

Sizes at ``scale=1``: 8 layers; a healthy step keeps the device busy for about 3 ms while
the host, running ahead, is held back only by the launch queue.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from explorer.scenarios.simulator import (
    COMPUTE_STREAM,
    COPY_STREAM,
    DEVICE_TYPE_CPU,
    DEVICE_TYPE_CUDA,
    Simulator,
)

TRAIN_FILE = "/synthetic/train.py"
#: function → the line its ``python_function`` frame names (torch writes the ``def`` line).
LINES: dict[str, int] = {
    "load_batch": 20,
    "to_device": 30,
    "forward": 40,
    "compiled_block": 48,
    "augment": 55,
    "compute_loss": 65,
    "check_finite": 75,
    "compute_metrics": 85,
    "train_step": 95,
    "remember": 102,
    "train": 110,
    "<module>": 130,
}
#: The line inside ``compiled_block`` where dynamo breaks the graph (a ``print``).
GRAPH_BREAK_LINE = 50
DATALOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
FALLBACK_OP = "aten::linalg_eig"

_GEMM = "ampere_sgemm_128x64_tn"
_RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
    "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
    "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::"
    "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2>)"
)
_FOREACH = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(...)"
)
_ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::{op}_kernel_cuda>"
_COPY_KERNEL = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>"

#: Bandwidths of the simulated link (bytes per ns = GB/s).
PINNED_GBPS = 22.0
PAGEABLE_GBPS = 7.0


@dataclass
class Pathologies:
    """What goes wrong in a scenario (all off: the clean baseline)."""

    input_wait_ns: float = 0.0  #: extra host time inside DataLoader ``__next__`` per step
    pageable_copies: bool = False  #: batch copied from pageable memory, blocking the host
    syncs_per_step: int = 0  #: ``.item()`` → ``cudaStreamSynchronize`` checks in forward
    fallback: bool = False  #: one op per step runs on the CPU (DtoH, CPU compute, HtoD)
    tiny_ops_per_step: int = 0  #: tiny elementwise kernels launched one by one
    compile_step: int | None = None  #: the step in which ``torch.compile`` compiles
    compile_ns: float = 40e6
    leak_bytes_per_step: int = 0  #: memory kept alive every step and never freed
    collector_events: bool = True  #: write Explorer's ``explorer_*`` events (else plain torch)


@dataclass
class Sizes:
    layers: int = 8
    batch_bytes: int = 6 << 20
    activation_bytes: int = 4 << 20
    grad_bytes: int = 1 << 20
    gemm_ns: float = 120_000
    relu_ns: float = 25_000
    mm_ns: float = 100_000
    foreach_ns: float = 40_000
    check_python_ns: float = 120_000  #: Python that uses each ``.item()`` value
    fallback_cpu_ns: float = 1.5e6
    fallback_bytes: int = 2 << 20


class TrainingLoop:
    """Runs ``steps`` training steps of the synthetic model on a :class:`Simulator`."""

    def __init__(self, sim: Simulator, pathologies: Pathologies, scale: int = 1) -> None:
        self.sim = sim
        self.p = pathologies
        self.z = Sizes(layers=8 * max(int(scale), 1))
        self.scale = max(int(scale), 1)
        self._grads: list[int] = []

    def py(self, function: str):
        return self.sim.py(TRAIN_FILE, LINES[function], function)

    # -- the whole run -------------------------------------------------------------------------
    def run(self, steps: int) -> None:
        sim = self.sim
        with self.py("<module>"), self.py("train"):
            sim.step = -1
            self._preroll()
            for n in range(steps):
                sim.step = n
                with sim.annotation(f"ProfilerStep#{n}"):
                    self.step(n)
            sim.step = steps
            sim.tag = "final"
            sim.synchronize("cudaDeviceSynchronize", stream=None)

    def _preroll(self) -> None:
        """The tail of the step before profiling began: the device is busy when step 0 starts,
        as it is when a profiler schedule starts recording mid-run."""
        sim = self.sim
        sim.tag = "preroll"
        with self.py("train_step"):
            for _ in range(sim.queue_depth):
                with sim.op("aten::mm"):
                    sim.launch(_GEMM, 150_000)
        self._next = self.to_device(self.load_batch())

    def step(self, n: int) -> None:
        """One iteration. The loop prefetches: it loads and copies the *next* batch first
        (on the copy stream when pinned), then trains on the batch copied one step earlier."""
        batch, ready = self._next
        self._next = self.to_device(self.load_batch())
        with self.py("train_step"):
            if ready is not None:
                self.sim.wait_event(COMPUTE_STREAM, ready)
            acts = self.forward(n)
            self.compute_loss()
            if self.p.tiny_ops_per_step:
                self.compute_metrics()
            self.backward(acts)
            self.optimizer_step(batch)
            if self.p.leak_bytes_per_step:
                self.remember()

    # -- data -----------------------------------------------------------------------------------
    def load_batch(self) -> int:
        sim = self.sim
        sim.tag = "dataloader"
        with self.py("load_batch"), sim.py("torch/utils/data/dataloader.py", 628, "__next__"):
            start = sim.t
            with sim.annotation(DATALOADER_NEXT):
                with sim.py("torch/utils/data/dataloader.py", 673, "_next_data"):
                    sim.work(25_000 + self.p.input_wait_ns)
                with sim.op("aten::stack"):
                    batch = sim.alloc(self.z.batch_bytes, DEVICE_TYPE_CPU)
                    sim.work(20_000)
            sim.span("dataloader", start, sim.t)
        return batch

    def to_device(self, cpu_batch: int) -> tuple[int, int | None]:
        """Copy a batch to the device: (device address, when the copy is done on the copy
        stream — None when the copy ran on the compute stream itself)."""
        sim = self.sim
        ready = None
        sim.tag = "input_copy"
        nbytes = self.z.batch_bytes
        with self.py("to_device"):
            with sim.op("aten::to"), sim.op("aten::_to_copy"):
                with sim.op("aten::empty_strided"):
                    batch = sim.alloc(nbytes)
                with sim.op("aten::copy_"):
                    if self.p.pageable_copies:
                        sim.launch(
                            "Memcpy HtoD (Pageable -> Device)",
                            nbytes / PAGEABLE_GBPS,
                            kind="memcpy",
                            runtime="cudaMemcpyAsync",
                            nbytes=nbytes,
                            src_mem="Pageable",
                            blocking=True,
                        )
                    else:
                        sim.launch(
                            "Memcpy HtoD (Pinned -> Device)",
                            nbytes / PINNED_GBPS,
                            kind="memcpy",
                            stream=COPY_STREAM,
                            runtime="cudaMemcpyAsync",
                            nbytes=nbytes,
                            src_mem="Pinned",
                        )
                        ready = sim.record_event(COPY_STREAM)
            sim.free(cpu_batch)
        return batch, ready

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, n: int) -> list[tuple[int, int]]:
        sim = self.sim
        acts: list[tuple[int, int]] = []
        with self.py("forward"):
            if self.p.fallback:
                self.augment()
            for i in range(self.z.layers):
                sim.tag = "forward"
                with sim.op("aten::linear"), sim.op("aten::addmm", {"Sequence number": i}) as op:
                    act = sim.alloc(self.z.activation_bytes)
                    sim.launch(_GEMM, self.z.gemm_ns)
                flow = sim.next_id("fwdbwd")
                sim.fwdbwd_flow("s", flow, op.start)
                with sim.op("aten::relu_"):
                    sim.launch(_RELU, self.z.relu_ns)
                acts.append((act, flow))
                if i < self.p.syncs_per_step:
                    self.check_finite()
            if self.p.compile_step is not None:
                self.compiled_block(n)
        return acts

    def check_finite(self) -> None:
        """``if not torch.isfinite(x).all().item(): ...`` — a host sync on every layer."""
        sim = self.sim
        with self.py("check_finite"):
            sim.tag = "check"
            with sim.op("aten::isnan"):
                flags = sim.alloc(1 << 16)
                sim.launch(_ELEMENTWISE.format(op="isnan"), 8_000)
            with sim.op("aten::any"):
                sim.launch(
                    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool>>", 6_000
                )
            sim.free(flags)
            with sim.op("aten::item"), sim.op("aten::_local_scalar_dense"):
                sim.launch(
                    "Memcpy DtoH (Device -> Pageable)",
                    2_000,
                    kind="memcpy",
                    runtime="cudaMemcpyAsync",
                    nbytes=1,
                    src_mem="Device",
                )
                sim.tag = "sync"
                sim.synchronize("cudaStreamSynchronize")
            sim.tag = "check"
            sim.work(self.z.check_python_ns)

    def augment(self) -> None:
        """An op the device cannot run: its input goes to the CPU and back (and the
        collector's ``explorer_fallback`` event says so)."""
        sim = self.sim
        z = self.z
        sim.tag = "fallback"
        args = {
            "op": FALLBACK_OP,
            "device": "cuda:0",
            "message": f"{FALLBACK_OP} is not implemented for 'CUDA'; running it on the CPU",
            "source_file": TRAIN_FILE,
            "source_line": LINES["augment"],
            "source_function": "augment",
        }
        with self.py("augment"), self._collector(FALLBACK_OP, "explorer_fallback", args):
            with sim.op(FALLBACK_OP):
                host_in = _blocking_to(sim, z.fallback_bytes, "DtoH (Device -> Pageable)", "Device",
                                       DEVICE_TYPE_CPU)  # fmt: skip
                with sim.op("aten::_linalg_eig"):
                    host_out = sim.alloc(z.fallback_bytes, DEVICE_TYPE_CPU)
                    sim.work(z.fallback_cpu_ns)
                sim.free(host_in)
                self._fallback_out = _blocking_to(
                    sim, z.fallback_bytes, "HtoD (Pageable -> Device)", "Pageable", DEVICE_TYPE_CUDA
                )
                sim.free(host_out)
        sim.tag = "forward"

    def compiled_block(self, n: int) -> None:
        """A ``torch.compile``d block: compiled (with a graph break) in one step, then run.
        Without collector events the compile shows only as dynamo's own annotation."""
        sim = self.sim
        with self.py("compiled_block"):
            if n == self.p.compile_step:
                sim.tag = "compile"
                args = {
                    "event": "compile",
                    "frame": "compiled_block",
                    "reason": "first call",
                    "source_file": TRAIN_FILE,
                    "source_line": LINES["compiled_block"],
                    "source_function": "compiled_block",
                }
                start = sim.t
                with self._collector("torch.compile: compiled_block", "explorer_compile", args):
                    inner = sim.t
                    with sim.annotation("_compile.compile_inner (dynamo_timed)"):
                        sim.work(self.p.compile_ns * 0.3)
                        brk = {
                            "event": "graph_break",
                            "frame": "compiled_block",
                            "reason": "Unsupported: builtin print() call",
                            "source_file": TRAIN_FILE,
                            "source_line": GRAPH_BREAK_LINE,
                            "source_function": "compiled_block",
                        }
                        with self._collector("torch.compile: graph break", "explorer_compile", brk):
                            pass
                        sim.work(self.p.compile_ns * 0.7)
                    inner_end = sim.t
                if self.p.collector_events:
                    sim.span("compile", start, sim.t)
                else:
                    sim.span("compile", inner, inner_end)
            sim.tag = "compiled"
            with sim.annotation("Torch-Compiled Region: 0/0"), sim.annotation("CompiledFunction"):
                for k in range(3):
                    with sim.op("triton_launch", pre_ns=4_000):
                        sim.launch(f"triton_poi_fused_add_mul_relu_{k}", 60_000)

    def _collector(self, name: str, cat: str, args: dict):
        """An Explorer collector event around the body, or nothing when the scenario
        simulates a plain torch.profiler trace (``collector_events=False``)."""
        if self.p.collector_events:
            return self.sim.slice(name, cat, args, 1_000, 1_000)
        return nullcontext()

    def compute_loss(self) -> None:
        sim = self.sim
        sim.tag = "loss"
        with self.py("compute_loss"), sim.op("aten::cross_entropy_loss"):
            with sim.op("aten::log_softmax"):
                self._loss = sim.alloc(1 << 18)
                sim.launch(
                    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", 30_000
                )
            with sim.op("aten::zeros"), sim.op("aten::zero_"):
                self._acc = sim.alloc(1 << 12)
                sim.launch(
                    "Memset (Device)",
                    2_000,
                    kind="memset",
                    runtime="cudaMemsetAsync",
                    nbytes=1 << 12,
                )
            with sim.op("aten::nll_loss_forward"):
                sim.launch(
                    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d",
                    15_000,
                )

    def compute_metrics(self) -> None:
        """Metrics written as many tiny in-place ops: the device finishes each before the
        host has launched the next."""
        sim = self.sim
        sim.tag = "tiny_ops"
        ops = ("mul", "add", "div", "sub")
        with self.py("compute_metrics"):
            for k in range(self.p.tiny_ops_per_step):
                op = ops[k % 4]
                with sim.op(f"aten::{op}_", pre_ns=9_000, post_ns=3_000):
                    sim.launch(_ELEMENTWISE.format(op=op), 2_500)

    # -- backward and optimizer ------------------------------------------------------------------
    def backward(self, acts: list[tuple[int, int]]) -> None:
        sim = self.sim
        sim.tag = "backward"
        with (
            sim.py("torch/_tensor.py", 521, "backward"),
            sim.py("torch/autograd/__init__.py", 267, "backward"),
        ):
            for act, flow in reversed(acts):
                with sim.op("autograd::engine::evaluate_function: AddmmBackward0") as ev:
                    sim.fwdbwd_flow("f", flow, ev.start)
                    with sim.op("AddmmBackward0"):
                        with sim.op("aten::mm"):
                            grad_in = sim.alloc(self.z.activation_bytes)
                            sim.launch(_GEMM, self.z.mm_ns)
                        with sim.op("aten::mm"):
                            self._grads.append(sim.alloc(self.z.grad_bytes))
                            sim.launch(_GEMM, self.z.mm_ns)
                    sim.free(act)
                    sim.free(grad_in)
                with (
                    sim.op("autograd::engine::evaluate_function: ThresholdBackward0"),
                    sim.op("aten::threshold_backward"),
                ):
                    sim.launch(_ELEMENTWISE.format(op="threshold_backward"), self.z.relu_ns)

    def optimizer_step(self, batch: int) -> None:
        sim = self.sim
        sim.tag = "optimizer"
        with sim.py("torch/optim/optimizer.py", 487, "wrapper"):
            with sim.annotation("Optimizer.step#SGD.step"):
                for _ in range(max(self.z.layers // 4, 1)):
                    with sim.op("aten::_foreach_add_"):
                        sim.launch(_FOREACH, self.z.foreach_ns)
            with sim.annotation("Optimizer.zero_grad#SGD.zero_grad"):
                sim.work(3_000)
                for g in self._grads:
                    sim.free(g)
                sim.free(batch)
                sim.free(self._loss)
                sim.free(self._acc)
                if self.p.fallback:
                    sim.free(self._fallback_out)
        self._grads = []

    def remember(self) -> None:
        """``history.append(features.clone())``: kept forever, so memory grows every step."""
        sim = self.sim
        sim.tag = "leak"
        with self.py("remember"), sim.op("aten::clone"):
            sim.alloc(self.p.leak_bytes_per_step)
            sim.launch(_COPY_KERNEL, 60_000)


def _blocking_to(
    sim: Simulator, nbytes: int, direction: str, src_mem: str, device_type: int
) -> int:
    """``tensor.to(...)`` through pageable memory: allocate on ``device_type``, then a
    synchronous ``cudaMemcpyAsync`` (``Memcpy <direction>``). Returns the allocation."""
    with sim.op("aten::to"), sim.op("aten::_to_copy"):
        with sim.op("aten::empty_strided"):
            out = sim.alloc(nbytes, device_type)
        with sim.op("aten::copy_"):
            sim.launch(
                f"Memcpy {direction}",
                nbytes / PAGEABLE_GBPS,
                kind="memcpy",
                runtime="cudaMemcpyAsync",
                nbytes=nbytes,
                src_mem=src_mem,
                blocking=True,
            )
    return out
