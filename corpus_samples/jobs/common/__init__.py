"""Helpers shared by the sample training jobs (logging setup, data, flight-recorder dumps)."""
