"""The ``oloproof`` command line: one thin click module per command over ``oloproof.app``
(entry point and exit codes: :mod:`oloproof.cli.main`), and the pytest plugin."""
