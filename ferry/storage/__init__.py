"""Buckets and paths over fsspec: where inputs come from and outputs go.

``locations`` parses URIs, ``registry`` maps a protocol to its filesystem (imported on first
use, with an install hint), ``staging`` brings inputs into a job through a content-addressed
cache, and ``outputs`` syncs a job's folders back and writes the manifest last.
"""
