//go:build !linux

package etcdembed

import "errors"

// shutdownPeerConns finds etcd's connections by walking /proc/self/fd,
// which only Linux has; elsewhere the member waits for TCP.
func shutdownPeerConns(peerEndpoints) (int, error) {
	return 0, errors.New("etcdembed: resetting peer connections needs Linux")
}
