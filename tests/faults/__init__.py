"""Fault tests: real services and real processes are crashed, restarted or cut off
under load, and what was acknowledged is counted back."""
