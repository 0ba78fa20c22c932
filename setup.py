"""mxhet: heterogeneity-aware distributed training for Apache MXNet / Gluon.

The MXNet build is chosen at install time: the CPU wheel by default, or a
CUDA build with ``MXHET_MXNET_VARIANT=cu117 pip install .`` (cu117 is the
newest CUDA build of MXNet 1.9.1 on PyPI; cu112, cu110, ... work too).
"""
import os
import re

from setuptools import find_packages, setup

_variant = os.environ.get("MXHET_MXNET_VARIANT", "cpu").strip().lower() or "cpu"
if _variant == "cpu":
    _mxnet = "mxnet==1.9.1"
elif re.fullmatch(r"cu\d{3}", _variant):
    _mxnet = "mxnet-%s==1.9.1" % _variant
else:
    raise SystemExit("MXHET_MXNET_VARIANT must be 'cpu' or a CUDA tag like 'cu117', got %r" % _variant)

setup(
    name="mxhet",
    version="0.1.0",
    description="Heterogeneity-aware distributed training (ESync and friends) for Apache MXNet / Gluon",
    long_description=open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")).read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.12",
    packages=find_packages(include=["mxhet", "mxhet.*", "kvstore_ext", "kvstore_ext.*", "bench", "bench.*"]),
    package_data={"mxhet.observe": ["templates/*.html", "static/*.js", "static/*.css"]},
    install_requires=[
        _mxnet,
        "numpy<1.24",            # mxnet 1.9.1 uses numpy aliases removed in 1.24
        "gluoncv==0.10.5.post0",
        # gluoncv's dependencies, held at releases that still work with numpy<1.24
        "opencv-python<4.9",
        "pandas<2.1",
        "scipy<1.12",
        "Pillow<11",
        "matplotlib<3.9",
        "pyzmq>=22",
        # the control plane's JSON codec: 5x faster parsing, 10x faster writing than json,
        # a fifth of the State Server's time per query (bench/results/control-plane.md)
        "orjson>=3.9,<4",
        "tqdm>=4.60",
        "simpy>=4.1,<5",         # the virtual-time engine's event loop (mxhet.sim)
        # observability (mxhet.observe): the dashboard's web app, the chart library its page
        # loads (plotly.js ships inside the plotly package, MIT), TensorBoard event files
        "flask>=3.1,<4",
        "plotly>=5.20,<8",
        "tensorboardX>=2.6,<3",
    ],
    extras_require={
        # websocket-client: the dashboard's browser test drives headless chromium over DevTools
        # pytest-xdist: make test runs two test files at a time (Makefile)
        "test": ["pytest>=7", "pytest-timeout>=2", "pytest-xdist>=3.5,<4", "websocket-client>=1.6,<2"],
    },
    entry_points={
        "console_scripts": [
            "mxhet-launch=mxhet.launcher:main",
            "mxhet-bench=bench.cli:main",
        ],
    },
)
