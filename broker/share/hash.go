package share

// The hash strategies need a score per (member, key) pair that is cheap,
// computed without allocation, and identical on every node for the same
// inputs: a node's candidate order differs from its peers' (its own members
// come first), so the choice must depend on the IDs alone for all nodes to
// agree on a key's owner.

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211

	// scoreSalt separates member hashes from key hashes, so a member whose
	// ID equals a key does not score mix(0) for it.
	scoreSalt = 0x9e3779b97f4a7c15
)

// fnv1a hashes b with 64-bit FNV-1a. FNV alone spreads short, similar
// strings (client-7, client-8) poorly in the high bits, which is why every
// use goes through mix afterwards.
func fnv1a(b []byte) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// fnv1aString is fnv1a for a string, kept separate so member IDs are hashed
// without converting them to a byte slice.
func fnv1aString(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// mix is the splitmix64 finaliser: a bijection on uint64 in which every input
// bit affects every output bit, turning structured input into values that
// behave like independent random numbers.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// memberHash is computed once per member on Join.
func memberHash(id string) uint64 { return mix(fnv1aString(id)) }

// keyHash is computed once per Pick.
func keyHash(b []byte) uint64 { return mix(fnv1a(b)) }

// score is the rendezvous weight of a member for a key; the member with the
// highest score owns the key. Both inputs are already mixed, and a further
// mix of their combination keeps the scores of two members for the same key
// uncorrelated, which is what makes a leaving member's keys spread evenly
// over the others.
func score(key, member uint64) uint64 { return mix(key ^ member ^ scoreSalt) }
