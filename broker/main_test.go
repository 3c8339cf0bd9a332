package broker_test

import (
	"testing"

	"github.com/linemq/linemq/broker/brokertest"
)

// TestMain fails the package if a server or client goroutine outlives the
// tests.
func TestMain(m *testing.M) { brokertest.Main(m) }
