"""All Kubernetes API I/O of the operator: raw JSON client, resources, and the writes per kind."""
