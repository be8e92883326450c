// The C interface of spm_shim.h over libsentencepiece. No C++ exception or type crosses it.
#include "spm_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

struct tr_spm {
    sentencepiece::SentencePieceProcessor sp;
};

static int fail(char *err, size_t errsz, const char *fmt, ...) {
    if (err && errsz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
    }
    return -1;
}

namespace {
// the training sentences, read in place
class Sentences : public sentencepiece::SentenceIterator {
  public:
    Sentences(const char *const *s, int64_t n) : s_(s), n_(n) { load(); }
    bool done() const override { return i_ >= n_; }
    void Next() override {
        i_++;
        load();
    }
    const std::string &value() const override { return cur_; }
    sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

  private:
    void load() {
        if (i_ < n_) cur_.assign(s_[i_]);
    }
    const char *const *s_;
    int64_t n_, i_ = 0;
    std::string cur_;
};
} // namespace

extern "C" int tr_spm_train(const char *const *sentences, int64_t n, const tr_spm_train_opts *o, char **model,
                            size_t *len, char *err, size_t errsz) {
    *model = nullptr;
    *len = 0;
    try {
        // Lossless: no normalisation rule, whitespace as it is (no trimming or collapsing),
        // every character of the corpus a piece, bytes for the rest. Deterministic: one
        // thread, every sentence (no sampling, so no shuffling and no random draw).
        const std::unordered_map<std::string, std::string> kw = {
            {"model_type", o->type},
            {"vocab_size", std::to_string(o->vocab_size)},
            {"hard_vocab_limit", "false"},
            {"character_coverage", "1.0"},
            {"byte_fallback", "true"},
            {"normalization_rule_name", "identity"},
            {"remove_extra_whitespaces", "false"},
            {"split_digits", "false"},
            {"max_sentence_length", "1000000"},
            {"input_sentence_size", "0"},
            {"shuffle_input_sentence", "false"},
            {"num_threads", "1"},
            {"pad_id", "0"},
            {"bos_id", "1"},
            {"eos_id", "2"},
            {"unk_id", "3"},
            {"pad_piece", "<pad>"},
            {"bos_piece", "<bos>"},
            {"eos_piece", "<eos>"},
            {"unk_piece", "<unk>"},
            {"unk_surface", "<unk>"},
            {"minloglevel", "100"},
        };
        Sentences it(sentences, n);
        std::string bytes;
        sentencepiece::util::Status s = sentencepiece::SentencePieceTrainer::Train(kw, &it, &bytes);
        if (!s.ok()) return fail(err, errsz, "SentencePiece training failed: %s", s.ToString().c_str());
        *model = static_cast<char *>(malloc(bytes.size() ? bytes.size() : 1));
        if (!*model) return fail(err, errsz, "out of memory");
        memcpy(*model, bytes.data(), bytes.size());
        *len = bytes.size();
        return 0;
    } catch (const std::exception &e) {
        return fail(err, errsz, "SentencePiece training failed: %s", e.what());
    }
}

extern "C" tr_spm *tr_spm_load(const void *model, size_t len, char *err, size_t errsz) {
    tr_spm *p = new (std::nothrow) tr_spm;
    if (!p) {
        fail(err, errsz, "out of memory");
        return nullptr;
    }
    try {
        sentencepiece::util::Status s =
            p->sp.LoadFromSerializedProto(absl::string_view(static_cast<const char *>(model), len));
        if (s.ok()) return p;
        fail(err, errsz, "not a SentencePiece model (%s)", s.ToString().c_str());
    } catch (const std::exception &e) {
        fail(err, errsz, "not a SentencePiece model (%s)", e.what());
    }
    delete p;
    return nullptr;
}

extern "C" void tr_spm_free(tr_spm *p) { delete p; }

extern "C" int tr_spm_size(const tr_spm *p) { return p->sp.GetPieceSize(); }

extern "C" const char *tr_spm_piece(const tr_spm *p, int id) { return p->sp.IdToPiece(id).c_str(); }

extern "C" int tr_spm_is_byte(const tr_spm *p, int id) { return p->sp.IsByte(id) ? 1 : 0; }

extern "C" int tr_spm_encode(const tr_spm *p, const char *text, int64_t *ids, int max) {
    std::vector<int> v;
    try {
        if (!p->sp.Encode(absl::string_view(text), &v).ok()) return -1;
    } catch (const std::exception &) {
        return -1;
    }
    for (size_t i = 0; i < v.size() && (int64_t)i < max; i++) ids[i] = v[i];
    return (int)v.size();
}

extern "C" size_t tr_spm_decode(const tr_spm *p, const int64_t *ids, int n, char *out, size_t outsz) {
    std::string text;
    try {
        std::vector<int> v((size_t)(n > 0 ? n : 0));
        int size = p->sp.GetPieceSize();
        for (int i = 0; i < n; i++) v[(size_t)i] = ids[i] >= 0 && ids[i] < size ? (int)ids[i] : p->sp.unk_id();
        if (!p->sp.Decode(v, &text).ok()) text.clear();
    } catch (const std::exception &) {
        text.clear();
    }
    if (outsz) {
        size_t k = text.size() < outsz - 1 ? text.size() : outsz - 1;
        memcpy(out, text.data(), k);
        out[k] = 0;
    }
    return text.size();
}
