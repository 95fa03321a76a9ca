"""The trial runner seam (one measured server launch per call) and the check of the requested GPU
against this machine."""
