// The files a run reads and writes, checked before it starts, and written so
// that a failure is never silent and never destroys something else.
//
// Inputs (data files, --resume, --load) must be regular files: a FIFO would
// block the run for ever, a device is not data. Outputs (--save,
// --checkpoint, --metrics, --trace, a command's --out files) must be regular
// files or absent, in a folder that exists and can be written, and none may
// be one of the run's inputs or another of its outputs. /dev/null is
// accepted as an output and means "discard": nothing is written.
//
// Whole files are replaced atomically (write_file_atomically): through a
// symlink to its target, keeping the mode of the file replaced, with no
// temporary file left on any error, and a temporary file left by an earlier
// run that was killed removed when the same target is next written. Files
// written as they grow (OutputStream) check every write, flush and close.
// A write that fails is a WriteError: exit 1, the file and the reason named.
#pragma once
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dpt {

// A write, flush or close of an output failed (a full disk, an I/O error):
// the run ends with exit status 1.
struct WriteError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A file the run reads, with the option that named it ("--resume", "--data").
struct InputFile {
    std::string option, path;
};

// A file the run writes. `may_replace`: the option of an input this output
// may be (--checkpoint may be the --resume file it goes on from), or "".
struct OutputFile {
    std::string option, path;
    std::string may_replace = "";
};

// "--resume FILE: " + what is wrong, as an InputError, unless `path` is a
// regular file that can be read (through symlinks). Never blocks.
void check_input_file(const std::string& option, const std::string& path);

// The same for a directory of inputs (--data DIR).
void check_input_dir(const std::string& option, const std::string& path);

// True for a path that names /dev/null (through symlinks): an output there
// is discarded, never written.
bool is_discard(const std::string& path);

// Checks every output before the run starts (InputError naming the option
// otherwise): see the head of this file. Outputs whose path is "" are not
// written and not checked; is_discard() ones are accepted.
void check_outputs(std::span<const OutputFile> outputs, std::span<const InputFile> inputs);

// The file a write to `path` replaces: `path`, or where its symlinks lead.
std::string write_target(const std::string& path);

// Replaces `path` with `bytes` so that a crash at any moment leaves either
// the old file or the new one, whole: a temporary file beside the target,
// written, fsync'ed, given the old file's mode (a new one gets the umask's),
// renamed over the target, then the directory fsync'ed. Nothing at all for
// a discard path. Throws WriteError naming `option` and the file.
void write_file_atomically(const std::string& path, std::span<const char> bytes, const std::string& option);
// The same for text.
inline void write_text_file(const std::string& path, const std::string& text, const std::string& option) {
    write_file_atomically(path, std::span<const char>(text.data(), text.size()), option);
}

// A command's --out DIR, before it runs: DIR made if absent, and each of
// `names` in it checked as an output (check_outputs). InputError naming
// --out otherwise.
void prepare_out_dir(const std::string& dir, std::span<const char* const> names);

// An output written as it grows (--metrics, --trace): every write checked.
// A discard path opens nothing and writes nothing.
class OutputStream {
   public:
    OutputStream() = default;
    // Opens `path` (truncated, or appended to), InputError naming `option`
    // when it cannot.
    OutputStream(const std::string& option, const std::string& path, bool append);
    ~OutputStream();  // closes, unchecked: close() is the checked end
    OutputStream(OutputStream&& other) noexcept;
    OutputStream& operator=(OutputStream&& other) noexcept;

    bool is_open() const { return fd_ >= 0 || discard_; }
    const std::string& path() const { return path_; }
    // Each throws WriteError naming the option and file when it fails.
    void write(std::string_view text);
    void flush();
    void close();

   private:
    [[noreturn]] void fail(const char* doing, int error);
    std::string option_, path_;
    std::string buffer_;
    int fd_ = -1;
    bool discard_ = false;
};

}  // namespace dpt
