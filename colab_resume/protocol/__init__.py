"""The run-directory protocol, as code: read these modules as its spec.

Everything two sessions, a reader on a laptop and a future version of this
package must agree on about a run directory lives here, and nothing else
does. Pure functions and record schemas: the I/O is the storage layer's
(:mod:`colab_resume.storage`, whose :class:`~colab_resume.storage.store_contract.Store`
states the primitives this protocol needs from a store).

* :mod:`~colab_resume.protocol.rundir`: the names of the objects (leases,
  heartbeats, checkpoints, the run and DONE records).
* :mod:`colab_resume.parsing` (below both this package and storage, which
  decodes every record with it): the one bounded parser of untrusted JSON
  records (size, nesting, numbers), and the checks of a field's range and
  a string's length that the schemas use.
* :mod:`~colab_resume.protocol.records`: the schemas of the ownership
  records (run, lease, heartbeat, DONE), checked field by field on read.
* :mod:`~colab_resume.protocol.manifest`: the commit marker and what it
  lists (each file's size and CRC32C, the training position).
* :mod:`~colab_resume.protocol.commit`: when a checkpoint counts as
  committed (the manifest exists and predates the next lease).
* :mod:`~colab_resume.protocol.listing`: one listing of ``lease/`` and
  ``checkpoints/`` per operation, and the one rule for lease names.

docs/protocol.md is the same protocol in prose.
"""
