package cluster

// CloseMesh closes only the node-to-node mesh, leaving the registry (and
// so the node's ownership records) in place: a node that etcd still lists
// but no other node can reach.
func (c *Cluster) CloseMesh() error { return c.mesh.Close() }
