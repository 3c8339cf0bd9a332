package registry

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A client's will outlives the node that holds its connection: when the
// node dies, so does the connection, and MQTT says its will must then be
// published. The registry keeps one record per client, wills/<client>,
// written by the claim of each new connection (ClaimConnection) and bound
// to no lease. Its value is the caller's (the cluster glue encodes the
// message and its timing); the registry only stores it, lists the records
// and takes one away for exactly one publisher.

// WillRecord is a will record as read from etcd.
type WillRecord struct {
	Client      string
	Value       []byte
	ModRevision int64 // what TakeWill compares on
}

// Wills reads every will record from etcd (a linearizable read), with the
// revision it was read at.
func (r *Registry) Wills(ctx context.Context) ([]WillRecord, int64, error) {
	resp, err := r.opts.Client.Get(ctx, r.keys.prefix+dirWills, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := make([]WillRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		c, ok := r.keys.willClient(string(kv.Key))
		if !ok {
			continue
		}
		out = append(out, WillRecord{Client: c, Value: kv.Value, ModRevision: kv.ModRevision})
	}
	return out, resp.Header.Revision, nil
}

// Will reads client's will record; false if it has none.
func (r *Registry) Will(ctx context.Context, client string) (WillRecord, bool, error) {
	resp, err := r.opts.Client.Get(ctx, r.keys.will(client))
	if err != nil || len(resp.Kvs) == 0 {
		return WillRecord{}, false, err
	}
	kv := resp.Kvs[0]
	return WillRecord{Client: client, Value: kv.Value, ModRevision: kv.ModRevision}, true, nil
}

// TakeWill deletes client's will record if it is still the one read at
// modRevision, and reports whether it did: of every node that tries, one
// alone succeeds, and it alone publishes the will. A record changed since
// (the client connected again, to any node) is left alone.
func (r *Registry) TakeWill(ctx context.Context, client string, modRevision int64) (bool, error) {
	k := r.keys.will(client)
	return r.deleteIf(ctx, k, clientv3.Compare(clientv3.ModRevision(k), "=", modRevision))
}

// DropWill deletes client's will record if its value is still value: the
// will was published or discarded by the node that wrote it. A record
// written since by another connection of the client's is left alone. It
// reports whether it deleted one.
func (r *Registry) DropWill(ctx context.Context, client, value string) (bool, error) {
	k := r.keys.will(client)
	return r.deleteIf(ctx, k, clientv3.Compare(clientv3.Value(k), "=", value))
}

// deleteIf deletes key k if cmp holds, and reports whether it did.
func (r *Registry) deleteIf(ctx context.Context, k string, cmp clientv3.Cmp) (bool, error) {
	resp, err := r.opts.Client.Txn(ctx).If(cmp).Then(clientv3.OpDelete(k)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
