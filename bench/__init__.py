"""Benchmarks: bench.offline (engines without HTTP), bench.serving (through HTTP), bench.deploy (the container
images), bench.studies (library comparisons), bench.common (what they share); `python -m bench --list` names them all
(bench/__main__.py)."""
