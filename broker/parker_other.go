//go:build !linux

package broker

// parker is unavailable off Linux: connections keep their reader goroutine.
type parker struct{}

func newParker(*Server) (*parker, error) { return nil, nil }

func (p *parker) park(*conn) bool { return false }
func (p *parker) unpark(*conn)    {}
func (p *parker) close()          {}
func (p *parker) count() int      { return 0 }
