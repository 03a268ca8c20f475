"""The application layer: the ONLY place that wires config → executor → store → evaluate →
report. Each command of the CLI is a few lines over a function here."""
