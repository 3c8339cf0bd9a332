package auth

import (
	"testing"

	"github.com/linemq/linemq/broker/brokertest"
)

func TestMain(m *testing.M) { brokertest.Main(m) }
