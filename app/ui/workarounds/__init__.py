"""Workarounds for what Textual does (and Python's collector under it) that the app cannot change: each module says
in one line, WORKS_AROUND, the Textual version and the behaviour, and tests/ui/test_workarounds.py fails when the
Textual installed is another than the one each was checked on (then check the behaviour is still there, and drop
the module where it is not). The rest of app/ui may be changed freely; these lean on Textual's internals.
"""
