"""Sphinx configuration. Build: ``tox -e docs`` or
``.venv/bin/sphinx-build -W -b html docs docs/_build/html``."""

import os
import sys

# the docs describe the checkout they sit in, installed or not
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src")))

import feinsum  # noqa: E402

project = "feinsum"
author = "the feinsum developers"
copyright = "the feinsum developers"
version = release = feinsum.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
# No intersphinx: builds run without network access.

source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "*.md"]
templates_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
# loopy, pyopencl and friends are real dependencies; nothing is mocked, so a page that
# documents a module that fails to import fails the build.

html_theme = "alabaster"
html_theme_options = {
    "description": "a database of code transformations for batched einsums",
    "fixed_sidebar": True,
}
html_static_path: list[str] = []


def setup(app):  # type: ignore[no-untyped-def]
    # index.rst's glob toctree picks up every other page; while there is none, its empty glob
    # is no mistake (Sphinx gives that warning no type, so suppress_warnings cannot silence it)
    import logging

    logging.getLogger("sphinx.sphinx.directives.other").addFilter(
        lambda record: "didn't match any documents" not in record.getMessage()
    )
