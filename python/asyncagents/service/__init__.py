"""The asyncagents HTTP service."""
