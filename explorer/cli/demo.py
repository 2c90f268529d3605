"""``explorer demo``: train a small model under the collector and show where to look.

The "main job" command of the README: on a fresh machine it runs a real training loop
(synthetic data) on the best available device, writes the trace, prints where it is and how
to look at it, prints the report, and opens the viewer when there is a display.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from explorer.cli import options
from explorer.errors import ExplorerError
from explorer.safe_write import atomic_write
from explorer.ui.app import has_display  # no Qt import: only the environment is read


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = options.verb_parser(
        subparsers,
        "demo",
        "train a small model with the collector and explain its trace",
        """Train a small CNN on synthetic data under explorer.collect(), write the trace, print
        the report and open the viewer.""",
    )
    p.add_argument(
        "--out", default="explorer-demo", help="output directory (default: ./explorer-demo)"
    )
    p.add_argument("--steps", type=int, default=8, help="training steps to record (default: 8)")
    p.add_argument("--device", default="auto", help="cpu, cuda, xpu, ... (default: best available)")
    p.add_argument(
        "--backend",
        choices=("default", "neuron-test"),
        default="default",
        help="neuron-test: run on Explorer's neuron test backend, a PrivateUse1 device on the "
        "CPU that sends the operators it lacks to the CPU, as a port to Trainium would "
        "(its timings are CPU timings, not Trainium's)",
    )
    p.add_argument("--no-view", action="store_true", help="do not open the viewer")
    options.add_force(p, "replace OUT/demo_train.py even if you changed it")
    return p


def run(args: argparse.Namespace) -> int:
    if args.steps < 1:
        raise ExplorerError("explorer demo: --steps must be at least 1")
    out = Path(args.out).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExplorerError(f"explorer demo: cannot create {out}: {exc.strerror or exc}") from None
    try:
        from explorer.collect import demo_workload
    except ImportError as exc:
        raise ExplorerError(f"explorer demo needs PyTorch: {exc}") from None
    # Run a copy beside the trace: its lines are the user's code in the report, and the
    # user can open it, change it and run it again.
    if args.backend == "neuron-test":
        from explorer.collect import neuron_test_backend

        neuron_test_backend.register()
        args.device = neuron_test_backend.NAME
        print(f"explorer demo: {neuron_test_backend.LABEL['description']}")
    _check_device(args.device)
    script = out / "demo_train.py"
    original = Path(demo_workload.__file__).read_bytes()
    if not (script.is_file() and script.read_bytes() == original):  # your edits are kept
        atomic_write(script, lambda tmp: tmp.write_bytes(original), force=args.force)
    namespace = runpy.run_path(str(script), run_name="explorer_demo")
    trace_path = Path(namespace["main"](str(out), steps=args.steps, device=args.device))

    print()
    print(f"Trace written: {trace_path}")
    print(f"Training script: {script}")
    print("Look at it with:")
    print(f"  explorer report {trace_path}     # why the step is slow, which line")
    print(f"  explorer view {trace_path}       # timeline and panels")
    print("  or open it in https://ui.perfetto.dev, TensorBoard or Holistic Trace Analysis")
    import explorer
    from explorer.report import render

    print()
    print(render(explorer.load(trace_path).data, format="text", color=sys.stdout.isatty()))
    if not args.no_view and has_display():
        from explorer.ui.app import main as view

        return int(view(str(trace_path)) or 0)
    if not args.no_view:
        print(
            "\nNo display (DISPLAY is not set), so the viewer was not opened. For a picture of "
            f"it: explorer view {trace_path} --screenshot window.png"
        )
    return 0


def _check_device(device: str) -> None:
    """A clear error for a device this machine does not have, before any training starts."""
    from explorer.collect.environment import device_problem

    problem = device_problem(device)
    if problem:
        raise ExplorerError(
            f"explorer demo: device {device!r} is not usable here ({problem}); use --device auto or cpu"
        )
