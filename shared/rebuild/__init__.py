"""An index made again from its log: materializing a log into an index (``materialize``), the
side-by-side rebuild and its swap (``sidebyside``), replay to a point in time (``replay``) and
recovery after Redis lost its data (``recovery``), and a node's leases on its agents with the
takeover of one another node held (``takeover``). The query process imports these only when an
``asOf`` search asks for one. Imports every other package of memoryd.shared."""
