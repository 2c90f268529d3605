"""Where Explorer and a peer define a figure differently on purpose, or a peer cannot answer.

THE one place for it (reviewed; keep it small). Each entry names the peer's figure, the
traces it applies to (file names, or ``ALL``), and the reason. A differential test compares
every figure on every trace except the pairs listed here; ``test_allow_list_is_live`` fails
when an entry names a figure no test compares or a trace that is not there, so the list
cannot rot. An Explorer bug is never listed here: its test fails until it is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL = ("*",)

#: Traces with device-side waits (``cuda_sync`` "Stream Wait Event" / "Event Sync" on a
#: stream, MTIA's ``event_wait``) that HTA keeps among its GPU "kernels".
HTA_DEVICE_WAITS = (
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "critical_path__cuda_event_sync__event_sync_trace.json.gz",
    "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",
)
#: Traces whose Inductor launcher ops (host ``cpu_op`` events named ``triton_*`` whose args
#: carry ``stream``) HTA takes for GPU kernels.
HTA_TRITON_LAUNCHERS = (
    "triton_example__triton_example.json.gz",
    "torch_compile_triton__trace.json.gz",
)


@dataclass(frozen=True)
class Allowed:
    figure: str
    traces: tuple[str, ...]
    reason: str


ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "hta.temporal",
        HTA_DEVICE_WAITS,
        "HTA counts a device-side wait (cuda_sync 'Stream Wait Event', MTIA event_wait) as GPU "
        "time: 'non-compute' when its name matches HTA's '.*Sync' pattern, else 'compute'. "
        "Explorer's device is waiting then, not working: the breakdown's sync_stall.",
    ),
    Allowed(
        "hta.temporal",
        HTA_TRITON_LAUNCHERS,
        "HTA takes every event whose args carry 'stream' for a GPU kernel, so Inductor's host "
        "launcher ops (cat cpu_op, named triton_*) count as GPU compute (95.8 µs of host time on "
        "triton_example); Explorer keeps host ops on the host.",
    ),
    Allowed(
        "hta.kernel_types",
        HTA_DEVICE_WAITS,
        "The same device-side waits: HTA types them COMPUTATION or OTHER, Explorer a wait.",
    ),
    Allowed(
        "hta.kernel_types",
        HTA_TRITON_LAUNCHERS,
        "The same Inductor launcher host ops that HTA takes for GPU kernels.",
    ),
)


def allowed(figure: str, trace: str) -> Allowed | None:
    """The entry that exempts ``figure`` on ``trace``, or None (then the figures must agree)."""
    for a in ALLOWED:
        if a.figure == figure and (a.traces == ALL or trace in a.traces):
            return a
    return None


ALLOWED += (
    Allowed(
        "tb.operators.recursive_total",
        ALL,
        "An op called inside an op of the same name (aten::arange in aten::arange): the plugin "
        "adds both calls' host and device time to the name's total, counting that time twice; "
        "Explorer's Operators table counts it once (its documented definition, as the time "
        "the name was running). Calls and self time are still compared.",
    ),
    Allowed(
        "tb.operators.negative_self",
        ALL,
        "Where the plugin's self time is negative (aten::empty -29.9 s on the AlexNet trace): "
        "it subtracts every runtime call with the op's External id, also ones outside the op. "
        "A negative time is no answer to compare with; the other ops' self times are compared.",
    ),
)

#: Traces whose runtime calls carry no host op's External id (HTA's sampled test traces
#: renumber them; the neuron test backend, MTIA and the MI210 GPU-only trace write none).
TB_UNLINKED_RUNTIME = (
    "neuron_cnn.pt.trace.json.gz",
    "call_stack__backward_thread.json",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "critical_path__cuda_event_sync__event_sync_trace.json.gz",
    "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz",
    "execution_trace__benchmark_simple_add_trace.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    "timeline_analysis__sampled_rank-0.json.gz",
    "trace_compare__base__base.json.gz",
    "trace_compare__test__test.json.gz",
    "trace_filter__sampled_rank-1.json.gz",
    "mi210__gpu_only_trace.json.gz",
    "trace_file_list__inference_rank_1.json.gz",
)

ALLOWED += (
    Allowed(
        "tb.operators.device_and_self",
        TB_UNLINKED_RUNTIME,
        "The plugin ties a runtime call to its op only by the op's External id; where the "
        "trace's runtime calls carry none (or renumbered ones) it gives every op 0 device time "
        "and leaves the launch time in the op's self time. Explorer ties them by nesting on "
        "the thread. Calls and total host time are still compared.",
    ),
)

ALLOWED += (
    Allowed(
        "tracelens.gpu_timeline",
        ("perf_model__normalization_layer_test.json.gz",),
        "TraceLens links device work to its launch only through a whole ac2g flow (its 's' "
        "and 'f' ends). This trace's 5 memsets (26.6 µs) have two 'f' ends and no 's', while "
        "the runtime call that launched each (hipMemsetAsync, same correlation id) is in the "
        "trace: Explorer links them by correlation and counts them as busy device time.",
    ),
)

ALLOWED += (
    Allowed(
        "tb.dataloader",
        (
            "cpu_cnn.pt.trace.json.gz",
            "cpu_item_every_step.pt.trace.json.gz",
            "neuron_cnn.pt.trace.json.gz",
            "ddp_4rank_broadcast_chain/rank0.pt.trace.json.gz",
            "ddp_4rank_slow_input/rank0.pt.trace.json.gz",
        ),
        "Traces with Python frames: Explorer's input time is the enumerate(DataLoader) "
        "annotation and torch/utils/data's own frames, so it also holds the loader's "
        "construction in the first step (__init__/__iter__, 0.8 ms on cpu_cnn) and the part of "
        "__next__'s frame outside the annotation (3% per step); the plugin counts the "
        "annotation only. Compared as Explorer's input time inside the plugin's "
        "enumerate(DataLoader) annotations; kernel, copy and communication time too.",
    ),
)

ALLOWED += (
    Allowed(
        "tb.kernel_vs_communication",
        TB_UNLINKED_RUNTIME + ("nccl_parser_config__nccl_data.json.gz",),
        "The plugin tells a communication kernel from a compute kernel only by the External id "
        "of the nccl:* op that launched it; where runtime calls carry none or renumbered ones "
        "(here the NCCL launches) it files NCCL kernels under Kernel: its Kernel is Explorer's "
        "compute + communication to the µs (106252 + 172259 = 278511 µs, timeline_analysis "
        "step 551). There the two are compared as their sum.",
    ),
)

#: HTA's before/after test pair: sampled traces that keep 5 of their runtime calls, so most
#: of their device work has a correlation id inside the capture but no launch in the file.
UNLINKED_IN_CAPTURE = ("trace_compare__base__base.json.gz", "trace_compare__test__test.json.gz")

ALLOWED += (
    Allowed(
        "hta.temporal",
        UNLINKED_IN_CAPTURE,
        "Device work whose launch was filtered out of the file (its correlation id lies inside "
        "the capture, above the first runtime call's): HTA drops it, Explorer counts it by the "
        "step window it ran in, because the device did that work (207 µs kernels on base). Only "
        "work launched before the capture (ids below the first runtime call's) belongs to no "
        "step, as in HTA; tests/analysis/test_launched_before_capture.py checks that case.",
    ),
    Allowed(
        "tb.steps",
        UNLINKED_IN_CAPTURE,
        "The same filtered launches: the plugin builds a step's window and Kernel/Memcpy time "
        "from the device work linked to its launches only (a 135 µs window for ProfilerStep#1009, "
        "which runs 118 ms here); Explorer's window holds the step's host range and the device "
        "work that ran in it.",
    ),
)

ALLOWED += (
    Allowed(
        "tb.operators.op_tree_self",
        ALL,
        "The plugin's self time is a call's time less its op-tree children, and its op tree "
        "is not the nesting: (1) it builds no node of a user_annotation (unless named like a "
        "collective) nor of a category it does not read, so their time inside an op stays in "
        "the op's self time (bytecode_tracing 577.9 µs on cpu_compile_graph_break, 186.5 µs "
        "of it in its bytecode_tracing_data annotations); (2) it ties a runtime call to the "
        "first op with its External id, wherever that is (nccl_parser_config: a 2393.6 µs "
        "cudaStreamGetPriority inside aten::cudnn_batch_norm_backward carries an id no op "
        "has; record_param_comms also loses the launches inside its nccl:* annotations). "
        "Explorer's self time is the call's time less its direct children (annotations and "
        "runtime calls are rows of their own), so host self times partition host time once. "
        "Compared as Explorer's self time plus the time the plugin's tree moves.",
    ),
)

ALLOWED += (
    Allowed(
        "tracelens.ops_summary",
        ALL,
        "TraceLens's ops_summary lists only the calls that launch a kernel themselves, each "
        "with its subtree's kernels: aten::where(cond) on owlv2 launches nothing itself (its "
        "aten::fill_ and inner aten::where do), so only the inner call is a row, 14.7 µs. "
        "Explorer's row for a name holds every call's subtree, once (20.6 µs, the fill_ "
        "kernels too), as its Operators table defines device time. Compared without the "
        "launches under a call of the name that launches nothing itself.",
    ),
)

ALLOWED += (
    Allowed(
        "tb.communication_wrappers",
        (
            "ddp_4rank_broadcast_chain/rank0.pt.trace.json.gz",
            "ddp_4rank_slow_input/rank0.pt.trace.json.gz",
        ),
        "CPU DDP (gloo): the plugin's Communication is its gloo:* annotations only; Explorer's "
        "host communication also holds the host in the c10d call that issues the collective "
        "(c10d::broadcast_, c10d::allreduce_, 164 ms on ddp_4rank_slow_input's rank 0) where "
        "no gloo:* span runs, which is time the step spends in a collective. Compared as "
        "Explorer's host communication inside the plugin's gloo:* spans.",
    ),
)

ALLOWED += (
    Allowed(
        "tb.dataloader",
        ("rank_non_gpu__rank_non_gpu.json.gz",),
        "TorchRec's '## load_batch ##' annotation (994 µs in step 1009) holds the "
        "enumerate(DataLoader) __next__ (71 µs) and the rest of fetching the batch; Explorer's "
        "input pipeline is every slice named like load_batch/DataLoader, the plugin's the "
        "DataLoader annotation only. Compared inside the plugin's DataLoader annotations.",
    ),
    Allowed(
        "tb.communication_wrappers",
        ("rank_non_gpu__rank_non_gpu.json.gz",),
        "The plugin knows five NCCL collectives by name (broadcast, reduce, all_reduce, "
        "all_gather, reduce_scatter): this TorchRec trace's nccl:all_to_all annotations and "
        "their record_param_comms (1924 µs of host time in step 1009) are CpuOp to it, 0 "
        "Communication. Compared inside the collectives the plugin knows (none here).",
    ),
)
