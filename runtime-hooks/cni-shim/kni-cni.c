/*
 * kni-cni: the CNI plugin a runtime execs. It forwards the call to kni-runtime and prints the
 * answer; all parsing and policy live in the daemon. A compiled executable because starting a
 * JavaScript runtime per call costs tens of milliseconds.
 *
 * Wire format on the unix socket (all integers uint32 big-endian):
 *   request:  field count, then per field: key length, key, value length, value
 *             (fields: CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS, CNI_PATH, STDIN)
 *   response: exit code, output length, output (written to stdout as is)
 *
 * The socket path is the "socket" string of the network config, else $KNI_CNI_SOCKET,
 * else /run/kni/cni.sock.
 *
 * Deadlines: connecting gives up after CONNECT_TIMEOUT_S (a stopped or wedged daemon whose
 * listen backlog is full), and the whole call after CALL_TIMEOUT_S, inside the 2 minutes the
 * kubelet gives RunPodSandbox (runtime-request-timeout) so the runtime sees kni's error, not
 * its own timeout. A runtime with a shorter CNI timeout sets KNI_CNI_TIMEOUT_SECONDS in its
 * environment (plugins inherit it). Either way the answer is a CNI error object naming what
 * timed out.
 *
 * A restart: kni-runtime stopping gracefully (a rolling update of its DaemonSet, systemctl
 * restart) leaves "<socket>.restarting" behind, and the next one removes it once it serves.
 * While that marker is younger than RESTART_GRACE_S and the socket is not served, STATUS
 * answers ready (the runtime would otherwise report the node's network not ready, and the
 * kubelet the node NotReady, for the moment of every restart) and the other commands wait for
 * the new daemon instead of failing into the kubelet's retry backoff; a call the stopping
 * daemon cut short is sent again to the new one (kni answers each command again the same way
 * for the same container). A crashed daemon leaves no marker: its absence is reported at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <sys/un.h>
#include <unistd.h>

/* Keep equal to the daemon's cap (runtime-hooks/cni/cni-wire.ts MAX_REQUEST, less 64 KiB of env). */
#define MAX_STDIN (1u << 20)
#define MAX_REPLY (4u << 20)
#define CONNECT_TIMEOUT_S 5
#define CALL_TIMEOUT_S 55
/* Keep equal to RESTART_GRACE_S in runtime-hooks/cni/cni-server.ts. */
#define RESTART_GRACE_S 60
#define DEFAULT_SOCKET "/run/kni/cni.sock"

static const char *fields[] = {"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static char *in;
static size_t in_len;

/* Finds "key" : "value" in the config JSON; values with escapes are not supported (not needed). */
static int json_string(const char *key, char *out, size_t outsz) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    for (const char *p = in; p && (p = strstr(p, pat)); p += strlen(pat)) {
        const char *q = p + strlen(pat);
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        if (*q != ':') continue;
        q++;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        if (*q != '"') continue;
        q++;
        const char *end = strchr(q, '"');
        if (!end || (size_t)(end - q) >= outsz) return 0;
        memcpy(out, q, end - q);
        out[end - q] = 0;
        return 1;
    }
    return 0;
}

/* JSON-escapes in into out (always NUL-terminated, cut short rather than overflow). */
static void json_escape(char *out, size_t cap, const char *in) {
    size_t o = 0;
    for (; *in && o + 7 < cap; in++) {
        unsigned char c = (unsigned char)*in;
        if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
        else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}

/* The config's cniVersion when it is a plain version string, else 1.0.0 (it is echoed in errors). */
static void error_version(char *out, size_t cap) {
    char v[32];
    snprintf(out, cap, "1.0.0");
    if (!json_string("cniVersion", v, sizeof v) || !*v) return;
    for (const char *p = v; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '.' || *p == '-')) return;
    snprintf(out, cap, "%s", v);
}

/* Formats a CNI error object: STATUS says 50 (cannot serve ADD), everything else 11 (try later). */
static int format_error(char *out, size_t cap, const char *msg, const char *detail) {
    char version[32], m[512], d[1024];
    error_version(version, sizeof version);
    json_escape(m, sizeof m, msg);
    json_escape(d, sizeof d, detail);
    const char *cmd = getenv("CNI_COMMAND");
    int code = cmd && strcmp(cmd, "STATUS") == 0 ? 50 : 11;
    return snprintf(out, cap, "{\"cniVersion\":\"%s\",\"code\":%d,\"msg\":\"%s\",\"details\":\"%s\"}\n", version, code, m, d);
}

/* A CNI error object for failures before the daemon answers. */
static void fail(const char *msg, const char *detail) {
    char out[2048];
    format_error(out, sizeof out, msg, detail);
    fputs(out, stdout);
    exit(1);
}

/* Prepared before the alarm is armed: the handler may only write() and _exit(). */
static char timeout_msg[2048];
static size_t timeout_len;

static void on_alarm(int sig) {
    (void)sig;
    if (write(1, timeout_msg, timeout_len) < 0) _exit(1);
    _exit(1);
}

static void arm_deadline(const char *what, unsigned seconds, const char *path) {
    char detail[256];
    snprintf(detail, sizeof detail, "no answer from %s within %u s", path, seconds);
    int n = format_error(timeout_msg, sizeof timeout_msg, what, detail);
    timeout_len = n > 0 && (size_t)n < sizeof timeout_msg ? (size_t)n : 0;
    signal(SIGALRM, on_alarm);
    alarm(seconds);
}

/* Connects, retrying while the daemon's backlog is full (AF_UNIX answers EAGAIN at once). */
static int connect_unix(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    while (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (errno != EAGAIN && errno != EINTR) return -1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL); /* the connect alarm ends this loop */
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* Seconds left of a graceful restart's grace (0: none): the marker's age, from its mtime. */
static long restart_left(const char *socket_path) {
    char marker[160];
    struct stat st;
    snprintf(marker, sizeof marker, "%s.restarting", socket_path);
    if (stat(marker, &st) != 0) return 0;
    long age = (long)(time(NULL) - st.st_mtime);
    return age >= 0 && age < RESTART_GRACE_S ? RESTART_GRACE_S - age : 0;
}

/* Not served (no socket file, or nobody listening): what a stopped daemon leaves. */
static int not_served(int err) { return err == ENOENT || err == ECONNREFUSED; }

/*
 * Connected to the daemon, waiting through a graceful restart (see the top); STATUS answers
 * ready and exits while a restarting daemon is away. Fails (exits) when it cannot connect.
 */
static int connect_or_wait(const char *path, const char *command) {
    arm_deadline("kni-runtime is not reachable: connecting timed out", CONNECT_TIMEOUT_S, path);
    int fd = connect_unix(path);
    long left = fd < 0 && not_served(errno) ? restart_left(path) : 0;
    if (left > 0) {
        if (strcmp(command ? command : "", "STATUS") == 0) exit(0);
        arm_deadline("kni-runtime is restarting and was not back in time", (unsigned)left, path);
        while (fd < 0 && not_served(errno) && restart_left(path) > 0) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
            fd = connect_unix(path);
        }
    }
    if (fd < 0) {
        char detail[256];
        snprintf(detail, sizeof detail, "connect %s: %s", path, strerror(errno));
        fail("kni-runtime is not reachable", detail);
    }
    return fd;
}

static void put32(char **p, uint32_t v) {
    (*p)[0] = v >> 24; (*p)[1] = v >> 16; (*p)[2] = v >> 8; (*p)[3] = v;
    *p += 4;
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int write_all(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w; n -= w;
    }
    return 0;
}

static int read_all(int fd, char *b, size_t n) {
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r; n -= r;
    }
    return 0;
}

int main(void) {
    /* VERSION needs no daemon, and runtimes send it with a bare config (no "socket").
     * Keep this list equal to SUPPORTED_VERSIONS in runtime-hooks/cni/cni-result.ts. */
    const char *command = getenv("CNI_COMMAND");
    if (command && strcmp(command, "VERSION") == 0) {
        printf("{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n");
        return 0;
    }
    size_t cap = 65536;
    in = malloc(cap + 1);
    for (;;) {
        if (in_len == cap) {
            if (cap >= MAX_STDIN) fail("network config on stdin is too large", "more than 1 MiB");
            cap *= 2;
            in = realloc(in, cap + 1);
        }
        ssize_t r = read(0, in + in_len, cap - in_len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail("cannot read stdin", strerror(errno));
        if (r == 0) break;
        in_len += r;
    }
    in[in_len] = 0;

    char path[108];
    const char *env = getenv("KNI_CNI_SOCKET");
    if (!json_string("socket", path, sizeof path)) snprintf(path, sizeof path, "%s", env && *env ? env : DEFAULT_SOCKET);

    size_t size = 4 + (NFIELDS + 1) * 8 + in_len + strlen("STDIN");
    for (size_t i = 0; i < NFIELDS; i++) {
        const char *v = getenv(fields[i]);
        size += strlen(fields[i]) + (v ? strlen(v) : 0);
    }
    char *req = malloc(size + 4), *p = req;
    put32(&p, (uint32_t)size);
    put32(&p, NFIELDS + 1);
    for (size_t i = 0; i < NFIELDS; i++) {
        const char *v = getenv(fields[i]);
        if (!v) v = "";
        put32(&p, strlen(fields[i])); memcpy(p, fields[i], strlen(fields[i])); p += strlen(fields[i]);
        put32(&p, strlen(v)); memcpy(p, v, strlen(v)); p += strlen(v);
    }
    put32(&p, 5); memcpy(p, "STDIN", 5); p += 5;
    put32(&p, in_len); memcpy(p, in, in_len); p += in_len;

    /* A daemon gone mid-call raises EPIPE on the write, not a signal that would kill us unanswered. */
    signal(SIGPIPE, SIG_IGN);
    int fd = connect_or_wait(path, command);
    const char *t = getenv("KNI_CNI_TIMEOUT_SECONDS");
    unsigned call_timeout = t && atoi(t) > 0 ? (unsigned)atoi(t) : CALL_TIMEOUT_S;
    unsigned char head[8];
    for (;;) {
        arm_deadline("kni-runtime did not answer in time", call_timeout, path);
        int sent = write_all(fd, req, p - req) == 0;
        if (sent && read_all(fd, (char *)head, 8) == 0) break;
        int err = errno;
        /* A kni stopping gracefully cut the call short: every command is idempotent by its
         * container id, so it goes again to the kni that comes next. */
        if (restart_left(path) <= 0) fail(sent ? "kni-runtime closed the connection without an answer" : "cannot send the request to kni-runtime", strerror(err));
        close(fd);
        fd = connect_or_wait(path, command);
    }
    uint32_t code = get32(head), len = get32(head + 4);
    if (len > MAX_REPLY) fail("kni-runtime answered too much", "more than 4 MiB");
    char *out = malloc(len + 1);
    if (read_all(fd, out, len) < 0) fail("kni-runtime's answer was cut short", strerror(errno));
    write_all(1, out, len);
    return (int)code;
}
