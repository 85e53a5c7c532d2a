"""py_test and py_library with the repository's conventions (sources, Python 3, pytest).

The macros only fill in defaults and pass every attribute on to the rules of
@rules_python//python:defs.bzl (the offline stand-in or the real rule set), so BUILD files that use
them take the real rules with no change.
"""

load("@rules_python//python:defs.bzl", "py_library", "py_test")

PYTEST = "@pypi//pytest"

def lanes_py_test(name, srcs = None, deps = [], size = "small", **kwargs):
    """A pytest file as a py_test: `<name>.py`, run by Python 3, with pytest among its deps.

    Every test file ends with `sys.exit(pytest.main([__file__, ...]))` and is the test's main, so
    pytest is a dependency of each.

    Args:
      name: the test; its source is `<name>.py` unless srcs names others.
      srcs: the sources; default `[name + ".py"]`.
      deps: what the test imports besides pytest.
      size: the test size; default "small".
      **kwargs: any other py_test attribute (data, args, tags, ...).
    """
    py_test(
        name = name,
        size = size,
        srcs = srcs or [name + ".py"],
        python_version = "PY3",
        deps = deps if PYTEST in deps else deps + [PYTEST],
        **kwargs
    )

def lanes_py_library(name, srcs = None, **kwargs):
    """A py_library of `<name>.py`.

    Args:
      name: the library; its source is `<name>.py` unless srcs names others.
      srcs: the sources; default `[name + ".py"]`.
      **kwargs: any other py_library attribute (deps, data, testonly, visibility, ...).
    """
    py_library(
        name = name,
        srcs = srcs or [name + ".py"],
        **kwargs
    )
