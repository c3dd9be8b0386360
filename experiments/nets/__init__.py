"""The studies' networks; every normalization layer in them comes from :mod:`bn`."""
