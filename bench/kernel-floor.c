// The kernel floor of one kni attach and one detach: the same rtnetlink messages kni sends, on
// the same kind of sockets, with the same netns handling, timed in C with nothing else around
// them (no IPC, no state dir, no allocation worth the name). npm run bench prints kni ÷ this.
//
//   kernel-floor BRIDGE NETNS_DIR N [routed] [gap=US]
//     (run inside the node netns; BRIDGE exists and is up)
//
// For i in 0..N-1, with a netns pinned at NETNS_DIR/floor<i> by the caller:
//   attach: open the pin O_PATH, readlink /proc/self/fd, fstat, reopen O_RDONLY, NS_GET_NSTYPE
//           (kni's openNetns); setns into the pod netns, a netlink socket (bind, CAP_ACK,
//           EXT_ACK), setns back; RTM_NEWLINK veth with NLM_F_ECHO (host end on the bridge with
//           kni's shared host-end MAC, peer eth0 created in the pod netns, one queue each way
//           on both ends; the echoed host end
//           gives both ifindexes); one write of addr_gen_mode none + hairpin + alias + up; one
//           write, in the pod, of addr_gen_mode none + lo up + eth0 up + two addresses + two
//           default routes.
//   routed (kni's podLink "routed"): the host end joins no bridge and gets no hairpin; its write
//           adds, per pod address, a /32 (/128) route scope link and a permanent neighbour
//           (the pod's MAC); the pod's addresses are /32 and /128, and its write adds, per
//           gateway, a permanent neighbour (the host ends' MAC) and a /32 (/128) route.
//   As kni's, every write of several requests asks an ack of its last request only (a failure
//   is answered anyway). The bridge's ifindex is looked up once, before the loop, as kni
//   knows it from the node's set-up.
//   detach: as kni's when the runtime tears the netns down next (NRI, CRI, CNI DEL from a
//           Kubernetes runtime): one RTM_NEWLINK moving the host end to the reap group with its
//           released alias; then, untimed per pod, one RTM_DELLINK of the whole group (what the
//           reaper thread does after the answers), reported as groupDeleteMs.
//   gap=US: sleep US microseconds before each attach, untimed, as kni's daemon waits for a
//           client's next call between its attaches: the bench's paced floor, which says
//           whether the pace matters (here pauses of milliseconds slow the same kernel work).
// Prints one line of JSON: {"attachMs":[...],"detachMs":[...],"groupDeleteMs":x}.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif
#define NS_GET_NSTYPE 0xb703
#define IFLA_BRPORT_MODE_ 4
// One queue each way on both veth ends, as kni asks (plugin/netlink/link.ts vethAdd); built
// with -DNUM_QUEUES=0 it asks none, as kni did before (docs/performance-history.md).
#ifndef NUM_QUEUES
#define NUM_QUEUES 1
#endif
#define REAP_GROUP 0x6b6e69 // kni's group for retired veths (plugin/pod/veth-reaper.ts)

static const char *stage = "start";

static void die(const char *what) {
    fprintf(stderr, "kernel-floor: %s (%s): %s\n", what, stage, strerror(errno));
    exit(1);
}

static int home_fd;
static const uint8_t host_mac[6] = {0xee, 0xee, 0xee, 0xee, 0xee, 0xee}; // kni's HOST_VETH_MAC
static uint32_t seq = 1;

static int nl_socket(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) die("socket");
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("bind");
    int one = 1;
    setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
    setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
    return fd;
}

// A message being built: header, fixed part, attributes; nests by offset.
struct msg {
    char buf[1024];
    size_t len;
};

static struct nlmsghdr *msg_start(struct msg *m, uint16_t type, uint16_t flags, const void *fixed, size_t flen) {
    struct nlmsghdr *h = (struct nlmsghdr *)(m->buf + m->len);
    memset(h, 0, NLMSG_HDRLEN);
    h->nlmsg_type = type;
    h->nlmsg_flags = NLM_F_REQUEST | flags;
    h->nlmsg_seq = seq++;
    memcpy((char *)h + NLMSG_HDRLEN, fixed, flen);
    h->nlmsg_len = NLMSG_HDRLEN + NLMSG_ALIGN(flen);
    m->len += h->nlmsg_len;
    return h;
}

static size_t attr_put(struct msg *m, struct nlmsghdr *h, uint16_t type, const void *data, size_t dlen) {
    size_t at = m->len;
    struct rtattr *a = (struct rtattr *)(m->buf + m->len);
    a->rta_type = type;
    a->rta_len = RTA_LENGTH(dlen);
    if (dlen) memcpy(RTA_DATA(a), data, dlen);
    m->len += RTA_ALIGN(a->rta_len);
    h->nlmsg_len = (uint32_t)((char *)m->buf + m->len - (char *)h);
    return at;
}

// kni marks every nest NLA_F_NESTED (the bridge's IFLA_PROTINFO needs it to be read as a nest).
static size_t nest_start(struct msg *m, struct nlmsghdr *h, uint16_t type) { return attr_put(m, h, type | NLA_F_NESTED, NULL, 0); }

static void nest_end(struct msg *m, size_t at) {
    struct rtattr *a = (struct rtattr *)(m->buf + at);
    a->rta_len = (unsigned short)(m->len - at);
}

static void attr_u32(struct msg *m, struct nlmsghdr *h, uint16_t type, uint32_t v) { attr_put(m, h, type, &v, 4); }
static void attr_u8(struct msg *m, struct nlmsghdr *h, uint16_t type, uint8_t v) { attr_put(m, h, type, &v, 1); }
static void attr_str(struct msg *m, struct nlmsghdr *h, uint16_t type, const char *s) { attr_put(m, h, type, s, strlen(s) + 1); }

// Sends every message of m in one write, the last one asking for an ack, and reads until that
// ack; dies on any error. Returns the ifindex of the first RTM_NEWLINK answer seen (a GETLINK's
// or an echoed create's), 0 if none, and its IFLA_LINK (a veth's peer) in *peer.
static int nl_exec(int fd, struct msg *m, int *peer) {
    struct nlmsghdr *last = NULL;
    for (struct nlmsghdr *h = (struct nlmsghdr *)m->buf; (char *)h < m->buf + m->len; h = (struct nlmsghdr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len))) last = h;
    last->nlmsg_flags |= NLM_F_ACK;
    uint32_t last_seq = last->nlmsg_seq;
    if (send(fd, m->buf, m->len, 0) < 0) die("send");
    char rb[16384];
    int index = 0;
    for (int done = 0; !done;) {
        ssize_t n = recv(fd, rb, sizeof rb, 0);
        if (n < 0) die("recv");
        for (struct nlmsghdr *h = (struct nlmsghdr *)rb; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_ERROR) {
                struct nlmsgerr *e = NLMSG_DATA(h);
                if (e->error) {
                    errno = -e->error;
                    die("netlink request");
                }
                if (h->nlmsg_seq == last_seq) done = 1;
            } else if (h->nlmsg_type == RTM_NEWLINK && !index) {
                struct ifinfomsg *ifi = NLMSG_DATA(h);
                index = ifi->ifi_index;
                if (peer) {
                    int len = (int)IFLA_PAYLOAD(h);
                    for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
                        if (a->rta_type == IFLA_LINK) *peer = *(int *)RTA_DATA(a);
                    }
                }
            }
        }
    }
    m->len = 0;
    return index;
}

static int getlink(int fd, const char *name) {
    struct msg m = {.len = 0};
    struct ifinfomsg ifi = {0};
    struct nlmsghdr *h = msg_start(&m, RTM_GETLINK, 0, &ifi, sizeof ifi);
    attr_str(&m, h, IFLA_IFNAME, name);
    attr_u32(&m, h, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS); // as kni asks: no counters in the answer
    return nl_exec(fd, &m, NULL);
}

// kni's retire (RTM_NEWLINK: the named link into the reap group, with its released alias) and
// its reaper's batch delete (RTM_DELLINK of the whole group, no name).
static void reap_group_request(int fd, uint16_t type, const char *name, const char *alias) {
    struct msg m = {.len = 0};
    struct ifinfomsg ifi = {0};
    struct nlmsghdr *h = msg_start(&m, type, 0, &ifi, sizeof ifi);
    if (name) attr_str(&m, h, IFLA_IFNAME, name);
    attr_u32(&m, h, IFLA_GROUP, REAP_GROUP);
    if (alias) attr_str(&m, h, IFLA_IFALIAS, alias);
    nl_exec(fd, &m, NULL);
}

static void set_nolinklocal(struct msg *m, int index) {
    struct ifinfomsg ifi = {.ifi_index = index};
    struct nlmsghdr *h = msg_start(m, RTM_NEWLINK, 0, &ifi, sizeof ifi);
    size_t spec = nest_start(m, h, IFLA_AF_SPEC);
    size_t in6 = nest_start(m, h, AF_INET6);
    attr_u8(m, h, IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE);
    nest_end(m, in6);
    nest_end(m, spec);
}

static void set_up(struct msg *m, int index, const char *name) {
    struct ifinfomsg ifi = {.ifi_index = index, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
    struct nlmsghdr *h = msg_start(m, RTM_NEWLINK, 0, &ifi, sizeof ifi);
    if (name) attr_str(m, h, IFLA_IFNAME, name);
}

static void neigh_permanent(struct msg *m, int index, int family, const uint8_t *ip, const uint8_t *mac) {
    struct ndmsg nd = {.ndm_family = (uint8_t)family, .ndm_ifindex = index, .ndm_state = NUD_PERMANENT};
    struct nlmsghdr *h = msg_start(m, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, &nd, sizeof nd);
    attr_put(m, h, NDA_LLADDR, mac, 6);
    attr_put(m, h, NDA_DST, ip, family == AF_INET ? 4 : 16);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int open_netns(const char *path) {
    int pfd = open(path, O_PATH | O_CLOEXEC);
    if (pfd < 0) die("open netns O_PATH");
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", pfd);
    if (readlink(link, target, sizeof target) < 0) die("readlink");
    struct stat st;
    if (fstat(pfd, &st) < 0) die("fstat");
    int fd = open(link, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("reopen netns");
    if (ioctl(fd, NS_GET_NSTYPE) != CLONE_NEWNET) die("not a netns");
    close(pfd);
    return fd;
}

static double tv_ms(struct timeval t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; }

int main(int argc, char **argv) {
    int routed = 0, gap_us = 0, usage = argc < 4;
    for (int a = 4; a < argc; a++) {
        if (!strcmp(argv[a], "routed")) routed = 1;
        else if (!strncmp(argv[a], "gap=", 4) && (gap_us = atoi(argv[a] + 4)) > 0 && gap_us <= 1000000) continue;
        else usage = 1;
    }
    if (usage) {
        fprintf(stderr, "usage: kernel-floor BRIDGE NETNS_DIR N [routed] [gap=US]\n");
        return 2;
    }
    const char *bridge = argv[1], *dir = argv[2];
    int n = atoi(argv[3]);
    home_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home_fd < 0) die("open home netns");
    int host = nl_socket();
    int br = getlink(host, bridge);
    if (!br) die("bridge lookup");
    double *att = calloc(n, sizeof *att), *det = calloc(n, sizeof *det);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    for (int i = 0; i < n; i++) {
        char path[4096], name[IFNAMSIZ], alias[64];
        snprintf(path, sizeof path, "%s/floor%d", dir, i);
        snprintf(name, sizeof name, "kfl%09d", i);
        snprintf(alias, sizeof alias, "kni:floor%d", i);
        uint8_t mac[6] = {0x0a, 0x58, 10, 200, (uint8_t)(i >> 8), (uint8_t)i};
        if (gap_us) usleep((useconds_t)gap_us);
        double t0 = now_ms();
        int ns = open_netns(path);
        if (setns(ns, CLONE_NEWNET) < 0) die("setns pod");
        int pod = nl_socket();
        if (setns(home_fd, CLONE_NEWNET) < 0) die("setns home");

        struct msg m = {.len = 0};
        struct ifinfomsg ifi = {0};
        struct nlmsghdr *h = msg_start(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO, &ifi, sizeof ifi);
        attr_str(&m, h, IFLA_IFNAME, name);
        attr_put(&m, h, IFLA_ADDRESS, host_mac, 6);
        attr_u32(&m, h, IFLA_MTU, 1500);
        if (!routed) attr_u32(&m, h, IFLA_MASTER, (uint32_t)br);
        if (NUM_QUEUES) {
            attr_u32(&m, h, IFLA_NUM_TX_QUEUES, NUM_QUEUES);
            attr_u32(&m, h, IFLA_NUM_RX_QUEUES, NUM_QUEUES);
        }
        size_t li = nest_start(&m, h, IFLA_LINKINFO);
        attr_str(&m, h, IFLA_INFO_KIND, "veth");
        size_t data = nest_start(&m, h, IFLA_INFO_DATA);
        size_t peer = attr_put(&m, h, VETH_INFO_PEER, &ifi, sizeof ifi);
        attr_str(&m, h, IFLA_IFNAME, "eth0");
        attr_u32(&m, h, IFLA_MTU, 1500);
        attr_put(&m, h, IFLA_ADDRESS, mac, 6);
        attr_u32(&m, h, IFLA_NET_NS_FD, (uint32_t)ns);
        if (NUM_QUEUES) {
            attr_u32(&m, h, IFLA_NUM_TX_QUEUES, NUM_QUEUES);
            attr_u32(&m, h, IFLA_NUM_RX_QUEUES, NUM_QUEUES);
        }
        nest_end(&m, peer);
        nest_end(&m, data);
        nest_end(&m, li);
        stage = "create veth";
        int pidx = 0;
        int hidx = nl_exec(host, &m, &pidx);
        if (!hidx || !pidx) die("no echo of the new veth (kernel older than 6.3?)");
        set_nolinklocal(&m, hidx);
        if (!routed) {
            struct ifinfomsg br_ifi = {.ifi_family = AF_BRIDGE, .ifi_index = hidx};
            h = msg_start(&m, RTM_SETLINK, 0, &br_ifi, sizeof br_ifi);
            size_t pi = nest_start(&m, h, IFLA_PROTINFO);
            attr_u8(&m, h, IFLA_BRPORT_MODE_, 1);
            nest_end(&m, pi);
        }
        struct ifinfomsg al = {.ifi_index = hidx};
        h = msg_start(&m, RTM_NEWLINK, 0, &al, sizeof al);
        attr_str(&m, h, IFLA_IFALIAS, alias);
        set_up(&m, hidx, NULL);
        struct { int fam; int plen; uint8_t a[16]; } addrs[2] = {
            {AF_INET, routed ? 32 : 16, {10, 200, (uint8_t)((i + 2) >> 8), (uint8_t)(i + 2)}},
            {AF_INET6, routed ? 128 : 64, {0xfd, 0, 0x02, 0, [14] = (uint8_t)((i + 2) >> 8), [15] = (uint8_t)(i + 2)}},
        };
        for (int k = 0; routed && k < 2; k++) {
            struct rtmsg rt = {.rtm_family = (uint8_t)addrs[k].fam, .rtm_dst_len = (uint8_t)addrs[k].plen, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT, .rtm_scope = RT_SCOPE_LINK, .rtm_type = RTN_UNICAST};
            h = msg_start(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof rt);
            attr_put(&m, h, RTA_DST, addrs[k].a, addrs[k].fam == AF_INET ? 4 : 16);
            attr_u32(&m, h, RTA_OIF, (uint32_t)hidx);
            neigh_permanent(&m, hidx, addrs[k].fam, addrs[k].a, mac);
        }
        stage = "host end settings";
        nl_exec(host, &m, NULL);

        set_nolinklocal(&m, pidx);
        set_up(&m, 0, "lo");
        set_up(&m, pidx, NULL);
        for (int k = 0; k < 2; k++) {
            struct ifaddrmsg ifa = {.ifa_family = (uint8_t)addrs[k].fam, .ifa_prefixlen = (uint8_t)addrs[k].plen, .ifa_index = (uint32_t)pidx};
            h = msg_start(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
            size_t alen = addrs[k].fam == AF_INET ? 4 : 16;
            attr_put(&m, h, IFA_LOCAL, addrs[k].a, alen);
            attr_put(&m, h, IFA_ADDRESS, addrs[k].a, alen);
            attr_u32(&m, h, IFA_FLAGS, addrs[k].fam == AF_INET6 ? 0x82 : 0x80);
        }
        uint8_t gw4[4] = {10, 200, 0, 1}, gw6[16] = {0xfd, 0, 0x02, 0, [15] = 1};
        for (int k = 0; routed && k < 2; k++) {
            neigh_permanent(&m, pidx, k ? AF_INET6 : AF_INET, k ? gw6 : gw4, host_mac);
            struct rtmsg rt = {.rtm_family = (uint8_t)(k ? AF_INET6 : AF_INET), .rtm_dst_len = k ? 128 : 32, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT, .rtm_scope = RT_SCOPE_LINK, .rtm_type = RTN_UNICAST};
            h = msg_start(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof rt);
            attr_put(&m, h, RTA_DST, k ? (void *)gw6 : (void *)gw4, k ? 16 : 4);
            attr_u32(&m, h, RTA_OIF, (uint32_t)pidx);
        }
        for (int k = 0; k < 2; k++) {
            struct rtmsg rt = {.rtm_family = (uint8_t)(k ? AF_INET6 : AF_INET), .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT, .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST};
            h = msg_start(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof rt);
            attr_put(&m, h, RTA_GATEWAY, k ? (void *)gw6 : (void *)gw4, k ? 16 : 4);
            attr_u32(&m, h, RTA_OIF, (uint32_t)pidx);
        }
        stage = "pod end, addresses and default routes";
        nl_exec(pod, &m, NULL);
        close(pod);
        close(ns);
        att[i] = now_ms() - t0;
    }
    getrusage(RUSAGE_SELF, &ru1);
    for (int i = 0; i < n; i++) {
        char name[IFNAMSIZ], alias[64];
        snprintf(name, sizeof name, "kfl%09d", i);
        snprintf(alias, sizeof alias, "kni-released:floor%d", i);
        double t0 = now_ms();
        stage = "retire veth";
        reap_group_request(host, RTM_NEWLINK, name, alias);
        det[i] = now_ms() - t0;
    }
    // What kni's reaper thread does after the answers: every retired veth in one request.
    double g0 = now_ms();
    stage = "delete the retired group";
    reap_group_request(host, RTM_DELLINK, NULL, NULL);
    double group = now_ms() - g0;
    printf("{\"attachMs\":[");
    for (int i = 0; i < n; i++) printf("%s%.4f", i ? "," : "", att[i]);
    printf("],\"detachMs\":[");
    for (int i = 0; i < n; i++) printf("%s%.4f", i ? "," : "", det[i]);
    printf("],\"groupDeleteMs\":%.4f,\"attachCpuMs\":{\"user\":%.4f,\"system\":%.4f}}\n", group,
           (tv_ms(ru1.ru_utime) - tv_ms(ru0.ru_utime)) / n, (tv_ms(ru1.ru_stime) - tv_ms(ru0.ru_stime)) / n);
    return 0;
}
