package broker

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestRefusedClientsRoundTrip: the clients a refusal names survive its
// text, as it crosses the mesh, whatever their ids hold.
func TestRefusedClientsRoundTrip(t *testing.T) {
	for _, clients := range [][]string{
		nil,
		{"historian"},
		{"a b", `q"uote`, "paren)", "ünï", ""},
	} {
		err := &refusedError{clients: clients}
		if !errors.Is(err, errForwardRefused) {
			t.Errorf("%v is not errForwardRefused", err)
		}
		remote := fmt.Errorf("peer: n2: %s", err.Error()) // as the mesh delivers it
		if got := refusedClients(remote); !slices.Equal(got, clients) {
			t.Errorf("refusedClients(%q) = %q, want %q", remote, got, clients)
		}
	}
	if got := refusedClients(errors.New("peer: n2: something else")); got != nil {
		t.Errorf("an unrelated error names %q", got)
	}
}
