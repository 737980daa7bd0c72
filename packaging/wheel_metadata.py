"""scikit-build-core's metadata provider for the wheel's dependencies (pyproject.toml): torch at the version of
the torch it is built against, whose libtorch memledger loads at run time from beside the package
(packaging/wheel.cmake). The wheel is built in that torch's environment (pip wheel . --no-build-isolation)."""


def dynamic_metadata(field, settings=None, project=None):
    if field != "dependencies":
        raise RuntimeError("wheel_metadata gives the dependencies only, not %r" % field)
    try:
        import torch
    except ImportError as error:
        raise RuntimeError("memledger's wheel is built against the torch of the Python that builds it, which has "
                           "none (%s): pip install torch there, then pip wheel . --no-build-isolation" % error)
    # 2.15.0+cu132 -> torch==2.15.0 (a local version such as +cu132 matches it; +cpu too).
    return ["torch==%s" % torch.__version__.split("+")[0]]
