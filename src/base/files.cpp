#include "base/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "base/errors.hpp"
#include "base/signals.hpp"

namespace dpt {
namespace {

// A path as a message shows it: a name of thousands of characters cut short.
std::string shown(const std::string& path) {
    if (path.size() <= 160) return path;
    return path.substr(0, 80) + "... (" + std::to_string(path.size()) + " characters)";
}

// What a stat error means, in a user's words.
std::string stat_error(int error) {
    switch (error) {
        case ENOENT: return "no such file";
        case ELOOP: return "too many levels of symbolic links (a symlink loop?)";
        case ENAMETOOLONG: return "file name too long";
        case ENOTDIR: return "a part of the path is not a directory";
        case EACCES: return "permission denied on a folder of the path";
        default: return std::strerror(error);
    }
}

// "a directory", "a FIFO (named pipe)", ...: what a non-regular file is.
const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

std::string parent_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string name_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

struct Identity {
    dev_t dev;
    ino_t ino;
    bool operator==(const Identity&) const = default;
};

std::optional<Identity> identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    return Identity{st.st_dev, st.st_ino};
}

// The umask, read without changing it for good (umask() sets as it reads).
mode_t current_umask() {
    static const mode_t mask = [] {
        const mode_t m = ::umask(022);
        ::umask(m);
        return m;
    }();
    return mask;
}

// `bytes` to `fd`, all of them.
bool write_all(int fd, const char* p, size_t size) {
    while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        p += n;
        size -= size_t(n);
    }
    return true;
}

// Temporary files NAME.tmp.XXXXXX in `dir` that no writer holds: what a
// run killed while writing NAME left. Each writer holds a lock on its own
// (write_file_atomically), so one still being written is never taken.
void remove_stale_temporaries(const std::string& dir, const std::string& name) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    const std::string prefix = name + ".tmp.";
    while (const dirent* e = ::readdir(d)) {
        const std::string entry = e->d_name;
        if (entry.size() != prefix.size() + 6 || entry.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string path = dir == "." ? entry : dir + "/" + entry;
        const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st {};
        const bool stale = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
        if (stale && ::unlink(path.c_str()) == 0)
            std::fprintf(stderr, "dptrain: removed %s, left by an earlier run that stopped while writing %s\n",
                         path.c_str(), name.c_str());
        ::close(fd);
    }
    ::closedir(d);
}

}  // namespace

bool is_discard(const std::string& path) {
    struct stat st {};
    return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

void check_input_file(const std::string& option, const std::string& path) {
    const std::string name = option + " " + shown(path) + ": ";
    if (path.empty()) throw InputError(option + ": an empty file name");
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw InputError(name + stat_error(errno));
    if (!S_ISREG(st.st_mode)) throw InputError(name + "is " + kind_of(st.st_mode) + ", not a regular file");
    if (::access(path.c_str(), R_OK) != 0) throw InputError(name + "cannot read (" + std::strerror(errno) + ")");
}

void check_input_dir(const std::string& option, const std::string& path) {
    const std::string name = option + " " + shown(path) + ": ";
    if (path.empty()) throw InputError(option + ": an empty directory name");
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw InputError(name + (errno == ENOENT ? std::string("no such directory") : stat_error(errno)));
    if (!S_ISDIR(st.st_mode)) throw InputError(name + "is " + kind_of(st.st_mode) + ", not a directory");
    if (::access(path.c_str(), R_OK | X_OK) != 0) throw InputError(name + "cannot read (" + std::strerror(errno) + ")");
}

std::string write_target(const std::string& path) {
    std::string at = path;
    for (int hops = 0; hops < 40; ++hops) {
        struct stat st {};
        if (::lstat(at.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return at;
        std::string link(size_t(st.st_size > 0 ? st.st_size : PATH_MAX), '\0');
        const ssize_t n = ::readlink(at.c_str(), link.data(), link.size());
        if (n < 0) return at;
        link.resize(size_t(n));
        at = link.starts_with('/') ? link : parent_of(at) + "/" + link;
    }
    return at;  // a loop: stat() says so to whoever looks
}

void check_outputs(std::span<const OutputFile> outputs, std::span<const InputFile> inputs) {
    struct Checked {
        const OutputFile* output;
        std::string where;  // the target's folder, resolved, and its name: equal for the same new file
        std::optional<Identity> id;
    };
    std::vector<Checked> checked;
    for (const OutputFile& o : outputs) {
        if (o.path.empty() || is_discard(o.path)) continue;
        const std::string name = o.option + " " + shown(o.path) + ": ";
        if (o.path.ends_with('/')) throw InputError(name + "names a directory, not a file");
        const std::string target = write_target(o.path);
        struct stat st {};
        const bool exists = ::stat(target.c_str(), &st) == 0;
        if (!exists && errno != ENOENT) throw InputError(name + stat_error(errno));
        if (exists && !S_ISREG(st.st_mode))
            throw InputError(name + "is " + kind_of(st.st_mode) + ": an output must be a regular file (or /dev/null, "
                             "to keep nothing)");
        // Beside it goes a temporary file NAME.tmp.XXXXXX.
        if (name_of(target).size() + 11 > NAME_MAX)
            throw InputError(name + "file name too long (at most " + std::to_string(NAME_MAX - 11) + " characters)");
        const std::string dir = parent_of(target);
        struct stat dst {};
        if (::stat(dir.c_str(), &dst) != 0) {
            if (errno == ENOENT) throw InputError(name + "directory " + dir + " does not exist");
            throw InputError(name + "directory " + dir + ": " + stat_error(errno));
        }
        if (!S_ISDIR(dst.st_mode)) throw InputError(name + dir + " is not a directory");
        if (::access(dir.c_str(), W_OK) != 0)
            throw InputError(name + "cannot write in " + dir + " (" + std::strerror(errno) + ")");
        if (exists && ::access(target.c_str(), W_OK) != 0)
            throw InputError(name + "cannot write it (" + std::strerror(errno) + ")");
        char resolved[PATH_MAX];
        const std::string where = (::realpath(dir.c_str(), resolved) ? std::string(resolved) : dir) + "/" + name_of(target);
        checked.push_back({&o, where, exists ? std::optional<Identity>(Identity{st.st_dev, st.st_ino}) : std::nullopt});
        const Checked& me = checked.back();
        for (const InputFile& in : inputs) {
            if (in.path.empty() || in.option == o.may_replace) continue;
            if (me.id && identity(in.path) == me.id)
                throw InputError(name + "is " + (in.path == o.path ? "also" : "the same file as") + " the run's input " +
                                 in.option + " " + in.path + ", which writing would destroy: give another file");
        }
        for (size_t i = 0; i + 1 < checked.size(); ++i) {
            const Checked& other = checked[i];
            if (other.where == me.where || (me.id && other.id == me.id))
                throw InputError(name + "is also the run's " + other.output->option + " " + other.output->path +
                                 ": give each output a file of its own");
        }
    }
}

void write_file_atomically(const std::string& path, std::span<const char> bytes, const std::string& option) {
    if (is_discard(path)) return;
    const std::string target = write_target(path);
    const std::string dir = parent_of(target), name = name_of(target);
    const auto fail = [&](const std::string& doing, int error) {
        throw WriteError(option + " " + path + ": cannot " + doing + " (" + std::strerror(error) + ")");
    };
    remove_stale_temporaries(dir, name);
    struct stat old {};
    const mode_t mode = ::stat(target.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~current_umask());

    std::string tmp = dir + "/" + name + ".tmp.XXXXXX";
    const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0) fail("create a file in " + dir, errno);
    ::flock(fd, LOCK_EX);  // ours: no other run's clean-up takes it (remove_stale_temporaries)
    TemporaryFile pending(tmp.c_str());  // a second Ctrl-C removes it as it exits
    const auto give_up = [&](const std::string& doing) {
        const int error = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail(doing, error);
    };
    if (!write_all(fd, bytes.data(), bytes.size())) give_up("write");
    if (::fchmod(fd, mode) != 0) give_up("set the mode of " + tmp);
    if (::fsync(fd) != 0) give_up("flush");
    if (::close(fd) != 0) {
        const int error = errno;
        ::unlink(tmp.c_str());
        fail("write", error);
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int error = errno;
        ::unlink(tmp.c_str());
        fail("replace " + target, error);
    }
    // Make the rename itself durable.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

void prepare_out_dir(const std::string& dir, std::span<const char* const> names) {
    if (dir.empty()) throw InputError("--out: an empty directory name");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw InputError("--out " + dir + ": cannot create (" + ec.message() + ")");
    std::vector<OutputFile> files;
    for (const char* name : names) files.push_back({"--out", dir + "/" + name});
    check_outputs(files, {});
}

OutputStream::OutputStream(const std::string& option, const std::string& path, bool append)
    : option_(option), path_(path) {
    if (is_discard(path)) {
        discard_ = true;
        return;
    }
    // O_NONBLOCK: a FIFO put in the file's place since it was checked fails
    // here instead of blocking.
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0666);
    if (fd_ < 0) throw InputError(option + " " + path + ": cannot write (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd_);
        fd_ = -1;
        throw InputError(option + " " + path + ": not a regular file");
    }
}

OutputStream::~OutputStream() {
    if (fd_ >= 0) ::close(fd_);
}

OutputStream::OutputStream(OutputStream&& other) noexcept { *this = std::move(other); }

OutputStream& OutputStream::operator=(OutputStream&& other) noexcept {
    if (this == &other) return *this;
    if (fd_ >= 0) ::close(fd_);
    option_ = std::move(other.option_);
    path_ = std::move(other.path_);
    buffer_ = std::move(other.buffer_);
    fd_ = std::exchange(other.fd_, -1);
    discard_ = std::exchange(other.discard_, false);
    return *this;
}

void OutputStream::fail(const char* doing, int error) {
    ::close(fd_);
    fd_ = -1;
    buffer_.clear();
    throw WriteError(option_ + " " + path_ + ": cannot " + doing + " (" + std::strerror(error) + ")");
}

void OutputStream::write(std::string_view text) {
    if (discard_ || fd_ < 0) return;
    buffer_.append(text);
    if (buffer_.size() >= (1 << 16)) flush();
}

void OutputStream::flush() {
    if (discard_ || fd_ < 0) return;
    if (!write_all(fd_, buffer_.data(), buffer_.size())) fail("write", errno);
    buffer_.clear();
}

void OutputStream::close() {
    if (discard_ || fd_ < 0) return;
    flush();
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
        const int error = errno;
        throw WriteError(option_ + " " + path_ + ": cannot write (" + std::strerror(error) + ")");
    }
}

}  // namespace dpt
