"""Parts of ``bench/soak.py``: the traffic mix, the stand-ins' process, sampling, analysis."""
