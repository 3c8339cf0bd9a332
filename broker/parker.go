package broker

// Parking idle connections.
//
// A connection's reader goroutine spends nearly all its life blocked in
// Read, and its stack (4 KiB or more once it has handled a CONNECT) is most
// of what an idle client costs. A gateway with thousands of sleepy sensors
// would pay that for nothing. So a connection that has sent nothing for
// Options.IdleParkAfter is parked: its descriptor goes into an epoll set
// watched by one goroutine, its reader goroutine exits and its read buffer
// is dropped. When the client sends (or closes), or its keep alive runs out,
// the parker starts a new reader goroutine, which carries on where the old
// one stopped. Parking changes nothing a client can observe.
//
// Linux only (parker_linux.go); elsewhere the parker is nil and connections
// are never parked.
