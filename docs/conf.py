"""Sphinx configuration for Queuey's documentation."""

import warnings

warnings.filterwarnings("ignore", message="pkg_resources is deprecated")

project = "Queuey"
author = "Queuey developers"
copyright = "2026, Queuey developers"
extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build"]
html_theme = "alabaster"
master_doc = "index"
