"""Spouts: interfaces and implementations."""
