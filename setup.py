"""Builds the one compiled module, sessions_app/formats/_rlm_native_c.c (the rlm-code fast
path of an import; everything else is in pyproject.toml). It is optional: where no C compiler
is at hand the build goes on without it and every import takes the Python path, with the same
rows (tests/test_rlm_native_compiled.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "sessions_app.formats._rlm_native_c",
            sources=["sessions_app/formats/_rlm_native_c.c"],
            extra_compile_args=["-O2"],
            libraries=["dl"],
            optional=True,
        )
    ]
)
