"""Bridges to other tools (lm-evaluation-harness, TRL). Each module imports its tool only when used, so
``import hf_trajpe`` and ``hf-trajpe --help`` stay free of them."""
