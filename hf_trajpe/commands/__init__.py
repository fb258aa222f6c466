"""Sub-commands of ``hf-trajpe``: every public module here with a ``NAME`` becomes one."""
