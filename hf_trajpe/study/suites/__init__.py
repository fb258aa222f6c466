"""The study suites, one folder each: its :class:`~hf_trajpe.study.suite.Suite` (``suite.py``, registered by name
with :func:`~hf_trajpe.study.registry.register_suite`), its config (``config.py``, a
:class:`~hf_trajpe.study.base_config.BaseStudyConfig`), its evaluation and its report. A new suite is a new
folder and its line here.

Import order is registration order, the order error messages list them in.
"""

from . import content, tasks, extension, recovery  # noqa: F401, I001  (registers them, in this order)
