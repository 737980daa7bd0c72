"""memledger's Python side: export a model for memledger, capture the memory of any loop, open the window.

    memledger.export(model, args, "model.pt2", dynamic={"input_ids": {0: "batch", 1: "seq"}})
    with memledger.capture("step.pickle"):
        train_step()
    python -m memledger step.pickle

Nothing here needs more than PyTorch 2.x; torch is imported when a function is called, so that
`python -m memledger FILE` starts the window without loading torch.
"""

def _version():
    # The wheel's metadata; in a checkout (packaging/torch-venv.sh's .pth), the repository's VERSION file.
    from pathlib import Path
    checkout = Path(__file__).resolve().parents[2] / "VERSION"
    if checkout.is_file():
        return checkout.read_text().split()[0]
    try:
        from importlib.metadata import version
        return version("memledger")
    except Exception:
        return "unknown"


__version__ = _version()

__all__ = ["export", "capture", "find_binary", "ExportError"]


def __getattr__(name):
    # memledger.ExportError, without importing torch when the package is imported (PEP 562).
    if name == "ExportError":
        from .export_program import ExportError
        return ExportError
    raise AttributeError("module 'memledger' has no attribute %r" % name)


def export(*args, **kwargs):
    """See memledger.export_program.export."""
    from .export_program import export as _export
    return _export(*args, **kwargs)


def capture(*args, **kwargs):
    """See memledger.capture_memory.capture."""
    from .capture_memory import capture as _capture
    return _capture(*args, **kwargs)


def find_binary():
    """The memledger executable this package runs (see memledger.binary.find_binary)."""
    from .binary import find_binary as _find
    return _find()
