"""The pieces of the dependency graph: which slices are nodes, and one module per family of
edges (host order, device order and launches, waits and syncs, data dependencies).

:mod:`explorer.analysis.dependency_graph` puts them together; :mod:`explorer.analysis.critical_path`
walks the result. Every builder is vectorised over slices (numpy sorts, ``searchsorted`` and
merges); a loop per track or per distinct name is the most any of them does.
"""
