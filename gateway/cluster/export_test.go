package cluster

// CloseMesh closes only the node-to-node mesh, leaving the registry (and
// so the node's ownership records) in place: a node that etcd still lists
// but no other node can reach.
func (c *Cluster) CloseMesh() error { return c.mesh.Close() }

// ForgetClaims empties the node's record of its own claims, as a restarted
// node that claimed nothing yet has it.
func (n *Node) ForgetClaims() {
	n.claimMu.Lock()
	clear(n.claimed)
	n.claimMu.Unlock()
}
