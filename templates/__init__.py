"""Jinja templates for the generated C (shipped inside the wheel as mbgen.templates)."""
