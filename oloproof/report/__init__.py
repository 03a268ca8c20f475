"""Rendering of what ``oloproof.app`` computed: terminal tables, the HTML bundle, the JSON
results (SPEC §15), JSONL, OTLP and comparison documents. Nothing here judges a case: every
verdict shown was decided by the app layer, and only the CLI prints the tables."""
