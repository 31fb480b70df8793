// One pod interface wired in one call from JavaScript (koffi): the veth, its host end's
// settings and its pod end's addresses and routes, the requests pod-wiring.ts's wirePod sends
// (the same bytes: test/wire-pod.test.ts compares them with the TypeScript builders).
//
// Why C: the kernel's part of an attach is the floor's (bench/kernel-floor.c), but the same
// sequence driven from JavaScript, back to back, took 0.67–0.70 ms against the floor's
// 0.48–0.49: ≈ 0.14 ms of JavaScript building, framing and parsing sixteen requests, the rest
// the kernel's own part run slower between them. With this call, whole daemons alternating (a
// Go client, 30 rounds of 200 pods): the in-daemon attach 0.740 → 0.664 ms (lower in 25 of
// 30), the Go client's Attach 1.069 → 0.967 ms (docs/performance-rounds.md, fourteenth round).
// Every other netlink request kni makes stays in plugin/netlink/.
//
//   int kni_wire_pod(host_fd, home_fd, netns_fd, bridge_index, routed, mtu, host_name,
//                    pod_name, alias, host_mac, pod_mac, addrs, result)
//     addrs: "address/prefix>gateway" entries joined by ','.
//     result (304 bytes): int32 errno, stage, request, host ifindex, pod ifindex, a pad; int64
//     CLOCK_MONOTONIC ns at the start, after the host end, at the end; 256 bytes of the
//     kernel's extended-ack text. Returns 0, or -1 with errno and stage set: stage 0 the
//     arguments, 1 the pod netns (setns or its socket), 2 the veth, 3 the host end's write, 4
//     the pod end's write; request: the failing request's index in that write, or -1 when a
//     call (setns, socket, send, recv) failed.
//   int kni_wire_build(... the same but fds, with host and pod ifindexes given ..., out, cap)
//     writes the three writes' messages (sequence numbers 0) to out, for the test; returns
//     their total length, or -1.
#define _GNU_SOURCE
// libc
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
// the kernel's netlink structs and numbers (NETLINK_EXT_ACK and NETLINK_CAP_ACK: Linux 4.12+)
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>

#include "netlink-message.h"

#define BRPORT_MODE 4
#define ADDR_GEN_MODE 8
#define GEN_MODE_NONE 1
#define MAX_ADDRS 8

struct addr { int family, prefix; uint8_t a[16], gw[16]; };
struct wire {
    int bridge, routed, mtu, naddrs;
    const char *host, *pod, *alias;
    uint8_t host_mac[6], pod_mac[6];
    struct addr addrs[MAX_ADDRS];
};
struct result {
    int32_t err, stage, request, host_index, pod_index, pad;
    int64_t t0, t1, t2;
    char message[256];
};

// --- the wiring's requests (netlink-message.h: the messages themselves) ---

static void no_link_local(struct msg *m, int index) {
    struct nlmsghdr *h = ifinfo(m, RTM_NEWLINK, AF_UNSPEC, index, 0, 0);
    size_t spec = nest(m, h, IFLA_AF_SPEC, 1);
    size_t in6 = nest(m, h, AF_INET6, 1);
    attr_u8(m, h, ADDR_GEN_MODE, GEN_MODE_NONE);
    nest_end(m, in6);
    nest_end(m, spec);
}

static void set_up(struct msg *m, int index) { ifinfo(m, RTM_NEWLINK, AF_UNSPEC, index, IFF_UP, IFF_UP); }

static int af(int family) { return family == 4 ? AF_INET : AF_INET6; }

/** A /32 or /128 route out of a link, scope link (route.ts hostRouteAdd). */
static void host_route(struct msg *m, int family, const uint8_t *a, int index) {
    struct rtmsg rt = {.rtm_family = (uint8_t)af(family), .rtm_dst_len = family == 4 ? 32 : 128, .rtm_table = RT_TABLE_MAIN,
                       .rtm_protocol = RTPROT_BOOT, .rtm_scope = RT_SCOPE_LINK, .rtm_type = RTN_UNICAST};
    struct nlmsghdr *h = start(m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof rt);
    attr_ip(m, h, RTA_DST, family, a);
    attr_u32(m, h, RTA_OIF, (uint32_t)index);
}

/** A permanent neighbour (neigh.ts neighSet). */
static void neighbour(struct msg *m, int family, const uint8_t *ip, int index, const uint8_t *mac) {
    struct ndmsg nd = {.ndm_family = (uint8_t)af(family), .ndm_ifindex = index, .ndm_state = NUD_PERMANENT};
    struct nlmsghdr *h = start(m, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, &nd, sizeof nd);
    attr(m, h, NDA_LLADDR, mac, 6);
    attr_ip(m, h, NDA_DST, family, ip);
}

static void queues(struct msg *m, struct nlmsghdr *h) {
    attr_u32(m, h, IFLA_NUM_TX_QUEUES, 1);
    attr_u32(m, h, IFLA_NUM_RX_QUEUES, 1);
}

static void build_veth(struct msg *m, const struct wire *w, int netns_fd) {
    struct nlmsghdr *h = ifinfo(m, RTM_NEWLINK, AF_UNSPEC, 0, 0, 0);
    if (h) h->nlmsg_flags |= NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO | NLM_F_ACK;
    attr_str(m, h, IFLA_IFNAME, w->host);
    attr(m, h, IFLA_ADDRESS, w->host_mac, 6);
    attr_u32(m, h, IFLA_MTU, (uint32_t)w->mtu);
    if (!w->routed && w->bridge) attr_u32(m, h, IFLA_MASTER, (uint32_t)w->bridge);
    queues(m, h);
    size_t info = nest(m, h, IFLA_LINKINFO, 1);
    attr_str(m, h, IFLA_INFO_KIND, "veth");
    size_t data = nest(m, h, IFLA_INFO_DATA, 1);
    size_t peer = nest(m, h, VETH_INFO_PEER, 0);
    struct ifinfomsg ifi = {0};
    if (room(m, sizeof ifi)) grow(m, h);
    attr_str(m, h, IFLA_IFNAME, w->pod);
    attr_u32(m, h, IFLA_MTU, (uint32_t)w->mtu);
    attr(m, h, IFLA_ADDRESS, w->pod_mac, 6);
    attr_u32(m, h, IFLA_NET_NS_FD, (uint32_t)netns_fd);
    queues(m, h);
    nest_end(m, peer);
    nest_end(m, data);
    nest_end(m, info);
}

static void build_host(struct msg *m, const struct wire *w, int hidx) {
    no_link_local(m, hidx);
    if (!w->routed) {
        struct nlmsghdr *h = ifinfo(m, RTM_SETLINK, AF_BRIDGE, hidx, 0, 0);
        size_t pi = nest(m, h, IFLA_PROTINFO, 1);
        attr_u8(m, h, BRPORT_MODE, 1);
        nest_end(m, pi);
    }
    attr_str(m, ifinfo(m, RTM_NEWLINK, AF_UNSPEC, hidx, 0, 0), IFLA_IFALIAS, w->alias);
    set_up(m, hidx);
    for (int i = 0; w->routed && i < w->naddrs; i++) {
        host_route(m, w->addrs[i].family, w->addrs[i].a, hidx);
        neighbour(m, w->addrs[i].family, w->addrs[i].a, hidx, w->pod_mac);
    }
}

static void build_pod(struct msg *m, const struct wire *w, int pidx) {
    no_link_local(m, pidx);
    attr_str(m, ifinfo(m, RTM_NEWLINK, AF_UNSPEC, 0, IFF_UP, IFF_UP), IFLA_IFNAME, "lo");
    set_up(m, pidx);
    for (int i = 0; i < w->naddrs; i++) {
        const struct addr *a = &w->addrs[i];
        struct ifaddrmsg ifa = {.ifa_family = (uint8_t)af(a->family), .ifa_prefixlen = (uint8_t)a->prefix, .ifa_index = (uint32_t)pidx};
        struct nlmsghdr *h = start(m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
        attr_ip(m, h, IFA_LOCAL, a->family, a->a);
        attr_ip(m, h, IFA_ADDRESS, a->family, a->a);
        attr_u32(m, h, IFA_FLAGS, a->family == 6 ? IFA_F_NODAD | IFA_F_PERMANENT : IFA_F_PERMANENT);
    }
    for (int i = 0; w->routed && i < w->naddrs; i++) {
        neighbour(m, w->addrs[i].family, w->addrs[i].gw, pidx, w->host_mac); // every host end's MAC is the gateway's
        host_route(m, w->addrs[i].family, w->addrs[i].gw, pidx);
    }
    for (int i = 0; i < w->naddrs; i++) {
        const struct addr *a = &w->addrs[i];
        struct rtmsg rt = {.rtm_family = (uint8_t)af(a->family), .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT,
                           .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST};
        struct nlmsghdr *h = start(m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof rt);
        attr_ip(m, h, RTA_GATEWAY, a->family, a->gw);
        attr_u32(m, h, RTA_OIF, (uint32_t)pidx);
    }
}

// --- arguments ---

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/** "aa:bb:cc:dd:ee:ff" and nothing else. By hand: sscanf took ≈ 3,500 instructions a MAC (callgrind). */
static int parse_mac(const char *s, uint8_t *mac) {
    for (int i = 0; i < 6; i++, s += 3) {
        int hi = hex_digit(s[0]), lo = hi < 0 ? -1 : hex_digit(s[1]);
        if (lo < 0 || s[2] != (i == 5 ? '\0' : ':')) return -1;
        mac[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/** One "address/prefix>gateway" entry. */
static int parse_addr(const char *s, size_t n, struct addr *a) {
    char buf[128];
    if (n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *slash = strchr(buf, '/'), *gt = strchr(buf, '>');
    if (!slash || !gt || gt < slash) return -1;
    *slash = 0;
    *gt = 0;
    a->family = strchr(buf, ':') ? 6 : 4;
    char *endp;
    long p = strtol(slash + 1, &endp, 10);
    if (*endp || p < 0 || p > (a->family == 4 ? 32 : 128)) return -1;
    a->prefix = (int)p;
    if (inet_pton(af(a->family), buf, a->a) != 1 || inet_pton(af(a->family), gt + 1, a->gw) != 1) return -1;
    return 0;
}

static int parse(struct wire *w, int bridge, int routed, int mtu, const char *host, const char *pod, const char *alias,
                 const char *host_mac, const char *pod_mac, const char *addrs) {
    memset(w, 0, sizeof *w);
    w->bridge = bridge;
    w->routed = routed;
    w->mtu = mtu;
    w->host = host;
    w->pod = pod;
    w->alias = alias;
    if (!host || !pod || !alias || !addrs || strlen(host) >= IFNAMSIZ || strlen(pod) >= IFNAMSIZ || strlen(alias) > 255) return -1;
    if (parse_mac(host_mac, w->host_mac) || parse_mac(pod_mac, w->pod_mac)) return -1;
    for (const char *s = addrs; *s;) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (w->naddrs == MAX_ADDRS || parse_addr(s, n, &w->addrs[w->naddrs++])) return -1;
        s += n + (e ? 1 : 0);
    }
    return 0;
}

// --- the kernel ---

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int fail(struct result *r, int stage, int err) {
    r->stage = stage;
    r->err = err;
    r->request = -1;
    return -1;
}

static uint32_t next_seq = 1;

/**
 * Sends one write and reads until the last request's answer: the first error wins (its
 * request index and the kernel's text in r). A link message named `link` (a create's echo, a
 * lookup's answer) gives its ifindex and its peer's.
 */
static int exchange(int fd, struct msg *m, struct result *r, int stage, const char *link) {
    uint32_t first = __atomic_fetch_add(&next_seq, (uint32_t)m->count, __ATOMIC_RELAXED) & 0x7fffffff;
    number(m, first);
    ssize_t sent;
    while ((sent = send(fd, m->b, m->len, 0)) < 0 && errno == EINTR) {}
    if (sent != (ssize_t)m->len) return fail(r, stage, sent < 0 ? errno : EMSGSIZE);
    uint8_t buf[16 * 1024]; // the write's answers: acks, errors and the new link's message
    int failed = 0;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return fail(r, stage, errno);
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            uint32_t idx = (h->nlmsg_seq - first) & 0x7fffffff;
            if (idx >= (uint32_t)m->count) continue;
            if (h->nlmsg_type == RTM_NEWLINK && link) {
                struct ifinfomsg *ifi = NLMSG_DATA(h);
                int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *ifi));
                int peer = 0, named = 0;
                for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
                    if (a->rta_type == IFLA_IFNAME && !strcmp(RTA_DATA(a), link)) named = 1;
                    if (a->rta_type == IFLA_LINK) memcpy(&peer, RTA_DATA(a), 4);
                }
                if (named) {
                    r->host_index = ifi->ifi_index;
                    r->pod_index = peer;
                }
                continue;
            }
            if (h->nlmsg_type != NLMSG_ERROR) continue;
            struct nlmsgerr *e = NLMSG_DATA(h);
            if (e->error && !failed) {
                failed = 1;
                r->err = -e->error;
                r->stage = stage;
                r->request = (int32_t)idx;
                // With NETLINK_CAP_ACK the echoed request is its header alone; the TLVs follow it.
                if (h->nlmsg_flags & NLM_F_ACK_TLVS) {
                    int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *e));
                    for (struct nlattr *a = (struct nlattr *)((uint8_t *)e + sizeof *e); len >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= len;
                         len -= NLA_ALIGN(a->nla_len), a = (struct nlattr *)((uint8_t *)a + NLA_ALIGN(a->nla_len))) {
                        if (a->nla_type == NLMSGERR_ATTR_MSG) snprintf(r->message, sizeof r->message, "%.*s", (int)(a->nla_len - NLA_HDRLEN), (char *)a + NLA_HDRLEN);
                    }
                }
            }
            if (idx == (uint32_t)m->count - 1) return failed ? -1 : 0;
        }
    }
}

/** A link's ifindex by name (RTM_GETLINK), 0 if none. */
static int link_index(int fd, const char *name, struct result *r) {
    struct msg m;
    reset(&m);
    struct nlmsghdr *h = ifinfo(&m, RTM_GETLINK, AF_UNSPEC, 0, 0, 0);
    attr_str(&m, h, IFLA_IFNAME, name);
    attr_u32(&m, h, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
    struct result probe = {0};
    if (exchange(fd, &m, &probe, 2, name) && probe.err != ENODEV) {
        r->err = probe.err, r->stage = 2, r->request = -1;
        memcpy(r->message, probe.message, sizeof r->message);
        return 0;
    }
    return probe.host_index;
}

/** A netlink socket in the netns open on netns_fd; the thread is back home before it returns (or the process ends). */
static int pod_socket(int home_fd, int netns_fd, struct result *r) {
    if (setns(netns_fd, CLONE_NEWNET) < 0) return fail(r, 1, errno);
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    int err = errno;
    if (fd >= 0) {
        struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
        int one = 1;
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one) < 0 ||
            setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one) < 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    if (setns(home_fd, CLONE_NEWNET) < 0) {
        // The thread would go on in the pod's netns: never continue (netns.ts does the same).
        fprintf(stderr, "fatal: cannot return to the node network namespace: %s\n", strerror(errno));
        abort();
    }
    if (fd < 0) return fail(r, 1, err);
    return fd;
}

int kni_wire_pod(int host_fd, int home_fd, int netns_fd, int bridge, int routed, int mtu, const char *host, const char *pod,
                 const char *alias, const char *host_mac, const char *pod_mac, const char *addrs, struct result *r) {
    memset(r, 0, sizeof *r);
    r->t0 = now_ns();
    struct wire w;
    if (parse(&w, bridge, routed, mtu, host, pod, alias, host_mac, pod_mac, addrs)) return fail(r, 0, EINVAL);
    int pod_fd = pod_socket(home_fd, netns_fd, r);
    if (pod_fd < 0) return -1;
    struct msg m;
    int rc = -1;
    reset(&m);
    build_veth(&m, &w, netns_fd);
    if (m.overflow) { fail(r, 2, E2BIG); goto out; }
    if (exchange(host_fd, &m, r, 2, w.host)) goto out;
    if (!r->host_index) r->host_index = link_index(host_fd, w.host, r);
    if (!r->pod_index) r->pod_index = link_index(pod_fd, w.pod, r); // a kernel before 6.3 announces no peer index
    if (!r->host_index || !r->pod_index) { if (!r->err) fail(r, 2, ENODEV); goto out; }
    reset(&m);
    build_host(&m, &w, r->host_index);
    if (m.overflow) { fail(r, 3, E2BIG); goto out; }
    if (exchange(host_fd, &m, r, 3, NULL)) goto out;
    r->t1 = now_ns();
    reset(&m);
    build_pod(&m, &w, r->pod_index);
    if (m.overflow) { fail(r, 4, E2BIG); goto out; }
    if (exchange(pod_fd, &m, r, 4, NULL)) goto out;
    rc = 0;
out:
    close(pod_fd);
    r->t2 = now_ns();
    if (!r->t1) r->t1 = r->t2;
    return rc;
}

int kni_wire_build(int netns_fd, int bridge, int routed, int mtu, const char *host, const char *pod, const char *alias,
                   const char *host_mac, const char *pod_mac, const char *addrs, int hidx, int pidx, uint8_t *out, uint32_t cap) {
    struct wire w;
    if (parse(&w, bridge, routed, mtu, host, pod, alias, host_mac, pod_mac, addrs)) return -1;
    struct msg m;
    size_t total = 0;
    for (int part = 0; part < 3; part++) {
        reset(&m);
        if (part == 0) build_veth(&m, &w, netns_fd);
        if (part == 1) build_host(&m, &w, hidx);
        if (part == 2) build_pod(&m, &w, pidx);
        if (m.overflow || total + m.len > cap) return -1;
        number(&m, 0);
        for (size_t o = 0; o < m.len;) { // sequence numbers 0: the test compares bodies and flags
            struct nlmsghdr *h = (struct nlmsghdr *)(m.b + o);
            h->nlmsg_seq = 0;
            o += NLMSG_ALIGN(h->nlmsg_len);
        }
        memcpy(out + total, m.b, m.len);
        total += m.len;
    }
    return (int)total;
}
