// SPDX-License-Identifier: Apache-2.0
// ALEPH's data plane at the XDP hook (ALEPH Sec. 5.3-5.6): the Aggregation Service that sums
// gradient segments in an eBPF map under a bpf_spin_lock, the Gradient Forwarder (Fig. 3: the
// completing packet is overwritten and forwarded upstream; Fig. 4: it is copied to every member by
// a devmap broadcast, and a devmap egress program rewrites each copy's addresses), and the fetch
// path the Integrity Check (Algorithm 2) uses to ask again for a lost aggregate.
//
// Wire format (UDP payload, all fields in network byte order), mirrored by src/proto.rs:
//   u32 magic "ALPH" | u16 job | u8 kind | u8 worker | u32 round | u32 segment | s32 grad[128]
// kind: 0 gradient (worker -> aggregator), 1 result (aggregate, the paper's "multicast signal"),
//       2 fetch (a receiver asks for an aggregate it lost).
// Gradients are 32-bit fixed point (the user-space side encodes g as round(g * 2^16), Q15.16);
// the sums wrap modulo 2^32 like a switch's integer ALU.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define GRADS 128
#define MAGIC 0x414C5048u
#define KIND_GRAD 0
#define KIND_RESULT 1
#define KIND_FETCH 2

#define MODE_UPSTREAM 0
#define MODE_MULTICAST 1

struct aleph_hdr {
	__u32 magic;
	__u16 job;
	__u8 kind;
	__u8 worker;
	__u32 round;
	__u32 segment;
	__s32 grad[GRADS];
};

// One segment's slot (Sec. 5.3, Gradient Storage: "a bitmap, a spinlock, and a segment").
struct slot {
	struct bpf_spin_lock lock;
	__u32 round;  // the training round the slot holds
	__u32 bitmap; // workers whose segment has been added in `round`
	__u32 done;   // 1 once bitmap == full mask: grad[] holds the aggregate
	__s32 grad[GRADS];
};

struct config {
	__u32 job;
	__u32 full_mask;     // the members' bits (the paper's 0xFFFF for 16 members)
	__u32 mode;          // MODE_UPSTREAM or MODE_MULTICAST
	__u32 upstream_ifindex;
	__u16 port;          // UDP destination port of ALEPH traffic (network byte order)
	__u16 notify_port;   // receiver: where the last aggregate is passed up (network byte order)
	__u32 segments;      // receiver: aggregates per round
	__u32 global_id;     // upstream: this aggregator's bit at the next level (Sec. 4.2's global ID)
};

// The Gradient Receiver's count of this round's aggregates (Sec. 5.5: "detects the last packet by
// counting the number of packets").
struct rx_count {
	struct bpf_spin_lock lock;
	__u32 round;
	__u32 count;
};

// Where a packet leaving through an interface goes (ALEPH Sec. 4.2: the routing information the
// aggregators and the PS keep because XDP bypasses the network stack).
struct route {
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__u32 dst_ip;   // network byte order
	__u32 src_ip;   // network byte order
	__u16 dst_port; // network byte order
	__u16 pad;
};

enum stat {
	ST_AGGREGATED = 0, // gradient packets added into a slot
	ST_DUPLICATE,      // dropped: the worker's bit was already set
	ST_STALE,          // dropped: an older round than the slot's
	ST_RESULT,         // aggregates emitted
	ST_FETCH_SERVED,   // fetch requests answered
	ST_FETCH_MISS,     // fetch requests for an aggregate not (yet) complete
	ST_BAD,            // ALEPH packets dropped: wrong job, worker outside the mask, segment out of range
	ST_RX_STORED,      // receiver: aggregates stored in its map
	ST_RX_NOTIFY,      // receiver: last aggregates passed up as the gradient fetch signal
	ST_NSTATS,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024); // resized by the loader before load
	__type(key, __u32);
	__type(value, struct slot);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ST_NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rx_count);
} rx_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32); // egress ifindex
	__type(value, struct route);
} routes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} members SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline __u16 ip_checksum(struct iphdr *ip)
{
	__u32 sum = 0;
	__u16 *p = (__u16 *)ip;
	ip->check = 0;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(struct iphdr) / 2); i++)
		sum += p[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

// Overwrite the addresses with a route's (the paper's step 3 in Fig. 4); the UDP checksum is
// cleared (optional in IPv4) because the payload changed too.
static __always_inline void rewrite(struct ethhdr *eth, struct iphdr *ip, struct udphdr *udp,
				    const struct route *r)
{
	__builtin_memcpy(eth->h_dest, r->dst_mac, 6);
	__builtin_memcpy(eth->h_source, r->src_mac, 6);
	ip->daddr = r->dst_ip;
	ip->saddr = r->src_ip;
	ip->check = ip_checksum(ip);
	udp->source = udp->dest;
	udp->dest = r->dst_port;
	udp->check = 0;
}

// Answer a packet where it came from: swap the addresses (checksum unchanged by the IP swap).
static __always_inline void reflect(struct ethhdr *eth, struct iphdr *ip, struct udphdr *udp)
{
	__u8 mac[6];
	__builtin_memcpy(mac, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, mac, 6);
	__u32 a = ip->daddr;
	ip->daddr = ip->saddr;
	ip->saddr = a;
	__u16 p = udp->dest;
	udp->dest = udp->source;
	udp->source = p;
	udp->check = 0;
}

SEC("xdp")
int aleph_aggregate(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)ip + sizeof(*ip);
	struct aleph_hdr *h = (void *)udp + sizeof(*udp);

	// anything that is not ALEPH traffic goes to the network stack as usual (Sec. 5.3)
	if ((void *)(h + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	if (ip->frag_off & bpf_htons(0x3fff))
		return XDP_PASS;
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || udp->dest != cfg->port || h->magic != bpf_htonl(MAGIC))
		return XDP_PASS;
	if (bpf_ntohs(h->job) != cfg->job || h->worker >= 32) {
		count(ST_BAD);
		return XDP_DROP;
	}
	__u32 seg = bpf_ntohl(h->segment);
	__u32 round = bpf_ntohl(h->round);
	__u32 bit = 1u << (h->worker & 31);
	struct slot *s = bpf_map_lookup_elem(&slots, &seg);
	if (!s) {
		count(ST_BAD);
		return XDP_DROP;
	}

	if (h->kind == KIND_FETCH) {
		int ok = 0;
		bpf_spin_lock(&s->lock);
		if (s->round == round && s->done) {
			ok = 1;
#pragma unroll
			for (int i = 0; i < GRADS; i++)
				h->grad[i] = bpf_htonl(s->grad[i]);
		}
		bpf_spin_unlock(&s->lock);
		if (!ok) {
			count(ST_FETCH_MISS);
			return XDP_DROP;
		}
		h->kind = KIND_RESULT;
		reflect(eth, ip, udp);
		count(ST_FETCH_SERVED);
		return XDP_TX;
	}
	if (h->kind != KIND_GRAD || !(bit & cfg->full_mask)) {
		count(ST_BAD);
		return XDP_DROP;
	}

	int verdict = 0; // 0 added, 1 duplicate, 2 stale, 3 complete
	bpf_spin_lock(&s->lock);
	if ((__s32)(round - s->round) > 0) {
		// a newer round: the slot is cleared lazily by its first packet, so the previous
		// aggregate stays readable (Gradient Receiver, Integrity Check) until then
		s->round = round;
		s->bitmap = 0;
		s->done = 0;
	}
	if (round != s->round) {
		verdict = 2;
	} else if (s->bitmap & bit) {
		verdict = 1;
	} else {
		if (s->bitmap == 0) {
			// the first contribution is stored (Fig. 3: w1's segment)
#pragma unroll
			for (int i = 0; i < GRADS; i++)
				s->grad[i] = bpf_ntohl(h->grad[i]);
		} else {
#pragma unroll
			for (int i = 0; i < GRADS; i++)
				s->grad[i] += (__s32)bpf_ntohl(h->grad[i]);
		}
		s->bitmap |= bit;
		if ((s->bitmap & cfg->full_mask) == cfg->full_mask) {
			s->done = 1;
			verdict = 3;
			// the completing packet is overwritten with the aggregate (Fig. 3)
#pragma unroll
			for (int i = 0; i < GRADS; i++)
				h->grad[i] = bpf_htonl(s->grad[i]);
		}
	}
	bpf_spin_unlock(&s->lock);

	if (verdict == 1) {
		count(ST_DUPLICATE);
		return XDP_DROP;
	}
	if (verdict == 2) {
		count(ST_STALE);
		return XDP_DROP;
	}
	count(ST_AGGREGATED);
	if (verdict == 0)
		return XDP_DROP; // absorbed into the slot
	count(ST_RESULT);
	if (cfg->mode == MODE_MULTICAST) {
		h->kind = KIND_RESULT;
		h->worker = 0xff;
		// Fig. 4 step 2: one copy per member veth; aleph_egress rewrites each (step 3)
		return bpf_redirect_map(&members, 0, BPF_F_BROADCAST);
	}
	// to the next level the aggregate is one more gradient, from this aggregator's global ID
	h->kind = KIND_GRAD;
	h->worker = cfg->global_id & 31;
	__u32 up = cfg->upstream_ifindex;
	struct route *r = bpf_map_lookup_elem(&routes, &up);
	if (!r)
		return XDP_DROP;
	rewrite(eth, ip, udp, r);
	if (up == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(up, 0);
}

// Devmap egress program: runs on each broadcast copy before it leaves through its member's veth.
SEC("xdp/devmap")
int aleph_egress(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)ip + sizeof(*ip);
	if ((void *)(udp + 1) > data_end)
		return XDP_DROP;
	__u32 ifindex = ctx->egress_ifindex;
	struct route *r = bpf_map_lookup_elem(&routes, &ifindex);
	if (!r)
		return XDP_DROP;
	rewrite(eth, ip, udp, r);
	return XDP_PASS;
}

// The Gradient Receiver (Sec. 5.5) on a worker: each aggregate of the round is stored in this
// worker's own `slots` map with the multicast signal (bitmap = all ones, Algorithm 2 line 11) and
// dropped; the one that completes the round's count is passed up to the training program's UDP
// port (`notify_port`) as the gradient fetch signal, after which it reads the map.
SEC("xdp")
int aleph_receive(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)ip + sizeof(*ip);
	struct aleph_hdr *h = (void *)udp + sizeof(*udp);

	if ((void *)(h + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	if (ip->frag_off & bpf_htons(0x3fff))
		return XDP_PASS;
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || udp->dest != cfg->port || h->magic != bpf_htonl(MAGIC))
		return XDP_PASS;
	if (bpf_ntohs(h->job) != cfg->job || h->kind != KIND_RESULT) {
		count(ST_BAD);
		return XDP_DROP;
	}
	__u32 seg = bpf_ntohl(h->segment);
	__u32 round = bpf_ntohl(h->round);
	struct slot *s = bpf_map_lookup_elem(&slots, &seg);
	struct rx_count *c = bpf_map_lookup_elem(&rx_count, &zero);
	if (!s || !c) {
		count(ST_BAD);
		return XDP_DROP;
	}
	int fresh = 0;
	bpf_spin_lock(&s->lock);
	if ((__s32)(round - s->round) > 0 || (s->round == round && !s->done)) {
		s->round = round;
		s->bitmap = 0xffffffff; // the multicast signal
		s->done = 1;
		fresh = 1;
#pragma unroll
		for (int i = 0; i < GRADS; i++)
			s->grad[i] = bpf_ntohl(h->grad[i]);
	}
	bpf_spin_unlock(&s->lock);
	if (!fresh) {
		count(ST_DUPLICATE);
		return XDP_DROP;
	}
	count(ST_RX_STORED);
	int last = 0;
	bpf_spin_lock(&c->lock);
	if ((__s32)(round - c->round) > 0) {
		c->round = round;
		c->count = 0;
	}
	if (c->round == round) {
		c->count += 1;
		last = c->count == cfg->segments;
	}
	bpf_spin_unlock(&c->lock);
	if (!last)
		return XDP_DROP;
	count(ST_RX_NOTIFY);
	udp->dest = cfg->notify_port;
	udp->check = 0;
	return XDP_PASS;
}

// A receiving end with nothing to do: on veth, native-mode XDP_TX and redirects into an interface
// need its peer to run NAPI, which an attached XDP program turns on.
SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

// The empty program that drops: the floor of a live-frames test run (BPF_F_TEST_XDP_LIVE_FRAMES),
// where a passed frame would be handed to the network stack, a cost the aggregation program's
// drops and redirects do not have.
SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

// A devmap egress program with nothing to do: installed in place of aleph_egress by a probe, its
// counted run time is what the BPF statistics add per run on the aggregating core's own path.
SEC("xdp/devmap")
int xdp_devmap_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
