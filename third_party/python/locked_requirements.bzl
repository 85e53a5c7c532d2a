"""Repository rule: hash-locked Python wheels, one py_library per package.

Each locked wheel is installed with pip's --require-hashes into its own directory, so a
py_library really holds one package; its deps come from the wheel's Requires-Dist that are
also in the lock (extras and other-platform markers are left out).
"""

def _locked_requirements_impl(rctx):
    python = rctx.attr.python_interpreter
    script = rctx.path(rctx.attr._installer)
    lock = rctx.path(rctx.attr.lock_file)
    result = rctx.execute(
        [python, script, "--lock", lock, "--out", rctx.path(".")],
        timeout = 1200,
        quiet = False,
    )
    if result.return_code != 0:
        fail("locked_requirements: installing {} failed (pip needs the package index; see above):\n{}\n{}".format(
            rctx.attr.lock_file,
            result.stdout,
            result.stderr,
        ))

locked_requirements = repository_rule(
    implementation = _locked_requirements_impl,
    attrs = {
        "lock_file": attr.label(mandatory = True, allow_single_file = True),
        "python_interpreter": attr.string(default = "/usr/bin/python3"),
        "_installer": attr.label(default = "//third_party/python:install_locked.py"),
    },
)
