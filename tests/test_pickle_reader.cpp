#include "support/errors.h"
#include "snapshot/pickle_reader.h"
#include "snapshot/snapshot.h"
#include "pickle_describe.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <unistd.h>
#include <vector>

using namespace memledger;

namespace {

std::string bytes(std::initializer_list<int> b)
{
    std::string s;
    for (int c : b)
        s.push_back(static_cast<char>(c));
    return s;
}

std::string u32(std::uint32_t v)
{
    return bytes({int(v & 0xff), int((v >> 8) & 0xff), int((v >> 16) & 0xff), int(v >> 24)});
}

// The offset in a PickleError raised while reading `p`.
std::uint64_t errorOffset(const std::string& p)
{
    try {
        readPickle(p);
    } catch (const PickleError& e) {
        return e.offset();
    }
    ADD_FAILURE() << "no PickleError";
    return ~std::uint64_t {0};
}

std::string errorText(const std::string& p)
{
    try {
        readPickle(p);
    } catch (const PickleError& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(PickleReader, ReadsADictOfScalarsProtocol2)
{
    // pickle.dumps({'a': 1, 'b': -2, 'c': 1.5, 'd': None, 'e': True, 'f': 'héllo'}, protocol=2), by hand
    std::string p = bytes({0x80, 2, '}', 'q', 0, '('}) + "X" + u32(1) + "a" + "K\x01" + "X" + u32(1) + "b" + "J"
        + bytes({0xfe, 0xff, 0xff, 0xff}) + "X" + u32(1) + "c" + "G" + bytes({0x3f, 0xf8, 0, 0, 0, 0, 0, 0}) + "X"
        + u32(1) + "d" + "N" + "X" + u32(1) + "e" + bytes({0x88}) + "X" + u32(1) + "f" + "X" + u32(6) + "h\xc3\xa9llo"
        + "u.";
    auto doc = readPickle(p);
    const auto& r = doc.root();
    ASSERT_TRUE(r.isDict());
    EXPECT_EQ(doc.protocol(), 2);
    EXPECT_EQ(r.dictSize(), 6u);
    EXPECT_EQ(r.get("a")->asInt(), 1);
    EXPECT_EQ(r.get("b")->asInt(), -2);
    EXPECT_DOUBLE_EQ(r.get("c")->asFloat(), 1.5);
    EXPECT_TRUE(r.get("d")->isNone());
    EXPECT_TRUE(r.get("e")->asBool());
    EXPECT_EQ(r.get("f")->asStr(), "h\xc3\xa9llo");
    EXPECT_EQ(r.get("missing"), nullptr);
}

TEST(PickleReader, Protocol5FramesMemoTuplesAndLongs)
{
    // [(1, 2), (1, 2) again through the memo, 2**40, -2**40, 2**63-1, b'xy', ['s']] with a FRAME
    std::string body = bytes({']', 0x94, '(', 'K', 1, 'K', 2, 0x86, 0x94, 'h', 1}) + bytes({0x8a, 6, 0, 0, 0, 0, 0, 1})
        + bytes({0x8a, 6, 0, 0, 0, 0, 0, 0xff}) + bytes({0x8a, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
        + bytes({'C', 2, 'x', 'y', ']', '(', 0x8c, 1, 's', 'e', 'e', '.'});
    std::string p = bytes({0x80, 5, 0x95}) + u32(static_cast<std::uint32_t>(body.size())) + u32(0) + body;
    auto doc = readPickle(p);
    EXPECT_EQ(doc.protocol(), 5);
    const auto& l = doc.root().items();
    ASSERT_EQ(l.size(), 7u);
    EXPECT_EQ(l[0].kind(), PickleKind::Tuple);
    EXPECT_EQ(l[0].identity(), l[1].identity()); // shared, as in Python
    EXPECT_EQ(l[1].items()[1].asInt(), 2);
    EXPECT_EQ(l[2].asInt(), std::int64_t {1} << 40);
    EXPECT_EQ(l[3].asInt(), -(std::int64_t {1} << 40));
    EXPECT_EQ(l[4].asInt(), INT64_MAX);
    EXPECT_EQ(l[5].kind(), PickleKind::Bytes);
    EXPECT_EQ(l[6].items()[0].asStr(), "s");
}

TEST(PickleReader, RefusesCodeExecutionWithOffsetAndOpcode)
{
    // pickle.dumps of a class whose __reduce__ returns (os.system, ('echo pwned',)), protocol 2
    std::string p2 = bytes({0x80, 2}) + "cposix\nsystem\nq\x00X" + u32(10) + "echo pwnedq\x01\x85q\x02Rq\x03.";
    EXPECT_EQ(errorOffset(p2), 2u);
    EXPECT_NE(errorText(p2).find("GLOBAL"), std::string::npos);
    // the same at protocol 4: STACK_GLOBAL after two strings
    std::string p4
        = bytes({0x80, 4, 0x8c, 5}) + "posix" + bytes({0x94, 0x8c, 6}) + "system" + bytes({0x94, 0x93, 0x94}) + ".";
    EXPECT_EQ(errorOffset(p4), 19u); // 0x80 04 | 8c 05 posix | 94 | 8c 06 system | 94 | 93
    EXPECT_NE(errorText(p4).find("STACK_GLOBAL (0x93)"), std::string::npos);
    for (int op : {int('R'), int('b'), int('i'), int('o'), 0x81, 0x92, int('P'), int('Q'), 0x82, 0x83, 0x84}) {
        std::string p = bytes({0x80, 2, 'N', op, '.'});
        EXPECT_EQ(errorOffset(p), 3u) << "opcode " << op;
        EXPECT_NE(errorText(p).find("refused opcode"), std::string::npos) << "opcode " << op;
    }
}

TEST(PickleReader, BadInputsAreErrorsWithOffsets)
{
    EXPECT_NE(errorText(bytes({0x80, 6, 'N', '.'})).find("unsupported pickle protocol 6"), std::string::npos);
    EXPECT_NE(errorText(bytes({0x80, 2, ']', '(', 'K'})).find("truncated"), std::string::npos);
    EXPECT_NE(errorText(bytes({0x80, 2, ']'})).find("truncated"), std::string::npos);
    // a declared length of 2 GiB in a 12-byte file is refused before anything is allocated
    auto huge = bytes({0x80, 4, 'X'}) + u32(0x7fffffff) + "abc.";
    EXPECT_EQ(errorOffset(huge), 2u);
    EXPECT_NE(errorText(huge).find("declared length 2147483647"), std::string::npos);
    EXPECT_NE(
        errorText(bytes({0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '.'})).find("declared length"),
        std::string::npos);
    EXPECT_NE(errorText(bytes({0x80, 4, 0x95, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 'N', '.'})).find("frame"),
        std::string::npos);
    EXPECT_NE(errorText(bytes({0x80, 2, 'h', 7, '.'})).find("memo index 7"), std::string::npos);
    EXPECT_NE(errorText(bytes({0x80, 2, 'a', '.'})).find("stack underflow"), std::string::npos);
    EXPECT_NE(errorText(bytes({0x80, 2, 'K', 1, 'K', 2, 'a', '.'})).find("APPEND on a int"), std::string::npos);
    EXPECT_NE(errorText(bytes({0x80, 2, 0xff})).find("unknown or unsupported pickle opcode 0xff"), std::string::npos);
}

// Real snapshots write an unknown frame line as 18446744073709551615 (LONG1 of 9 bytes): an unsigned 64-bit
// value keeps its bits; anything wider is a float, never a refused file.
TEST(PickleReader, IntegersWiderThan64BitsSigned)
{
    auto doc = readPickle(bytes({0x80, 4, ']', '(', //
        0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, // 2^64 - 1: unsigned 64-bit
        0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, // 2^64: wider
        0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, // -129 * 2^56: wider, negative
        0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, // -2^63 written in 9 bytes: fits
        'e', '.'}));
    auto items = doc.root().items();
    ASSERT_EQ(items.size(), 4u);
    EXPECT_EQ(static_cast<std::uint64_t>(items[0].asInt()), 18446744073709551615ull);
    EXPECT_EQ(items[1].kind(), PickleKind::Float);
    EXPECT_DOUBLE_EQ(items[1].asFloat(), 18446744073709551616.0);
    EXPECT_EQ(items[2].kind(), PickleKind::Float);
    EXPECT_DOUBLE_EQ(items[2].asFloat(), -129.0 * 72057594037927936.0);
    EXPECT_EQ(items[3].asInt(), std::numeric_limits<std::int64_t>::min());
}

TEST(PickleReader, DeepNestingIsRefused)
{
    std::string marks = bytes({0x80, 2}) + std::string(100000, '(') + "N.";
    EXPECT_NE(errorText(marks).find("nested MARKs"), std::string::npos);
    // [[[[...]]]] 5000 deep, built the way pickle builds it: EMPTY_LIST ... then APPEND ...
    std::string lists = bytes({0x80, 2}) + std::string(5000, ']') + std::string(4999, 'a') + ".";
    EXPECT_NE(errorText(lists).find("nesting deeper than 1000 levels"), std::string::npos);
    // 900 deep is fine
    std::string ok = bytes({0x80, 2}) + std::string(900, ']') + std::string(899, 'a') + ".";
    EXPECT_NO_THROW(readPickle(ok));
}

TEST(PickleReader, SnapshotDecoderNamesTheFileReasonAndOffset)
{
    struct Bad {
        const char* what;
        std::string data;
        const char* expect;
    };
    std::string random;
    std::uint32_t x = 12345;
    for (int i = 0; i < 4096; ++i) {
        x = x * 1103515245 + 12345;
        random.push_back(static_cast<char>(x >> 24));
    }
    random[0] = static_cast<char>(0x80); // looks like a pickle for one byte
    const Bad bad[] = {
        {"empty", "", "empty file"},
        {"not a pickle", "PK\x03\x04 zip", "no pickle PROTO opcode"},
        {"truncated", bytes({0x80, 4, '}', 0x94, '(', 0x8c, 8}) + "segments", "truncated"},
        {"unknown protocol", bytes({0x80, 9, '}', '.'}), "unsupported pickle protocol 9 (2 to 5 are read) at byte 0"},
        {"random bytes", random, "at byte"},
        {"os.system", bytes({0x80, 2}) + "cposix\nsystem\nq\x00X" + u32(2) + "idq\x01\x85q\x02Rq\x03.",
            "refused opcode GLOBAL (0x63)"},
        {"deep nesting", bytes({0x80, 2}) + std::string(100000, '(') + ".", "nested MARKs"},
        {"huge declared length", bytes({0x80, 4, 0x8d, 0, 0, 0, 0, 0, 0, 0, 0x40}) + ".", "declared length"},
        {"wrong shape", bytes({0x80, 4, 'K', 7, '.'}), "not a PyTorch memory snapshot"},
        {"segments not a list", bytes({0x80, 4, '}', '(', 0x8c, 8}) + "segments" + bytes({'K', 1, 'u', '.'}),
            "'segments' is missing or not a list"},
    };
    for (const auto& b : bad) {
        try {
            decodeSnapshot(b.data, "bad-" + std::string(b.what) + ".pickle");
            ADD_FAILURE() << b.what << ": no error";
        } catch (const FileError& e) {
            EXPECT_EQ(e.path(), "bad-" + std::string(b.what) + ".pickle");
            EXPECT_NE(std::string(e.what()).find(b.expect), std::string::npos) << b.what << ": " << e.what();
        }
    }
}

namespace {

// Python's own pickle of `expr` (protocol 4), written by /usr/bin/python3.
std::string pythonPickle(const std::string& expr)
{
    auto path = std::string("/tmp/memledger-test-reducer-") + std::to_string(::getpid()) + ".pickle";
    std::string cmd = "/usr/bin/python3 -c \"import pickle, sys\nx = {'k': 7}\nopen(sys.argv[1], 'wb').write("
                      "pickle.dumps(" + expr + ", 4))\" " + path;
    if (std::system(cmd.c_str()) != 0)
        return {};
    std::ifstream in(path, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::remove(path.c_str());
    return s;
}

// Replaces dicts that have a "k" key by reduced(3, k + 100); counts its calls.
struct KReducer : PickleReducer {
    int calls = 0;
    bool reduce(PickleKind kind, PickleItems items, PickleValue& out) override
    {
        ++calls;
        if (kind != PickleKind::Dict || items.size() != 2 || !items[0].isStr() || items[0].asStr() != "k"
            || !items[1].isInt())
            return false;
        out = PickleValue::reduced(3, static_cast<std::uint32_t>(items[1].asInt() + 100));
        return true;
    }
};

} // namespace

// A reducer sees each container as it is put into another one, and its value takes the container's place
// everywhere the pickle refers to it, also through the memo (one dict shared four times); what it declines
// stays as Python reads it.
TEST(PickleReader, AReducerReplacesContainersWhereverTheyAreShared)
{
    auto p = pythonPickle("{'a': [x, x, [x]], 'b': x, 'c': [1, [2, 3]], 'd': ()}");
    ASSERT_FALSE(p.empty());
    KReducer r;
    PickleReadHooks hooks;
    hooks.reducer = &r;
    auto owned = std::make_shared<const std::string>(p);
    PickleDocument doc = readPickle(owned, owned->data(), owned->size(), hooks);
    const PickleValue& root = doc.root();
    ASSERT_TRUE(root.isDict());
    const auto& a = root.get("a")->items();
    ASSERT_EQ(a.size(), 3u);
    for (const PickleValue* v : {&a[0], &a[1], &a[2].items()[0], root.get("b")}) {
        ASSERT_TRUE(v->isReduced());
        EXPECT_EQ(v->kind(), PickleKind::Reduced);
        EXPECT_EQ(v->reducedType(), 3u);
        EXPECT_EQ(v->reducedId(), 107u);
    }
    const auto& c = root.get("c")->items();
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].asInt(), 1);
    ASSERT_EQ(c[1].items().size(), 2u);
    EXPECT_EQ(c[1].items()[1].asInt(), 3);
    EXPECT_EQ(root.get("d")->kind(), PickleKind::Tuple);
    EXPECT_GT(r.calls, 0);

    // Declining everything gives the tree of a plain read.
    struct None : PickleReducer {
        bool reduce(PickleKind, PickleItems, PickleValue&) override { return false; }
    } none;
    hooks.reducer = &none;
    PickleDocument same = readPickle(owned, owned->data(), owned->size(), hooks);
    EXPECT_EQ(same.root().get("b")->get("k")->asInt(), 7);
    EXPECT_EQ(same.root().get("a")->items()[2].items()[0].get("k")->asInt(), 7);
}

namespace {

// Pickles that exercise every opcode the reader takes, the memo, sharing, nesting and long strings: what
// Python's pickle writes for them, protocols 2 to 5.
std::vector<std::string> variedPickles()
{
    std::vector<std::string> out;
    const char* exprs[] = {
        "{'a': [x, x, [x]], 'b': x, 'c': [1, [2, 3]], 'd': (), 'e': (1,), 'f': (1, 2), 'g': (1, 2, 3, 4)}",
        "[2**40, -2**40, 2**63 - 1, 2**64 - 1, -2**63, 2**80, -2**100, 255, 256, 65535, 65536, -1, 1.5, -0.0]",
        "['s' * 300000, b'b' * 70000, 'é' * 5000, bytearray(b'xyz'), '', b'', {'k': 'v' * 1000}]",
        "[{'action': 'alloc', 'addr': 2**47 + i, 'size': 512 * i, 'frames': [x] * (i % 7)} for i in range(3000)]",
        "[True, False, None, set([1, 2]), frozenset([3]), [[[[[]]]]], {(1, 2): 'tuple key'}]",
        "[str(i) * (i % 40) for i in range(20000)]",
    };
    for (const char* e : exprs)
        for (int proto : {2, 3, 4, 5}) {
            auto path = std::string("/tmp/memledger-test-stream-") + std::to_string(::getpid()) + ".pickle";
            std::string cmd = "/usr/bin/python3 -c \"import pickle, sys\nx = {'k': 7}\nopen(sys.argv[1], 'wb').write("
                              "pickle.dumps("
                + std::string(e) + ", " + std::to_string(proto) + "))\" " + path;
            if (std::system(cmd.c_str()) != 0)
                continue;
            std::ifstream in(path, std::ios::binary);
            out.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            std::remove(path.c_str());
        }
    return out;
}

} // namespace

TEST(PickleReader, AStreamedReadGivesTheTreeOfAWholeRead)
{
    using namespace memledger::testing;
    auto pickles = variedPickles();
    ASSERT_EQ(pickles.size(), 24u);
    // Damaged ones too: cut short, a byte changed; the same error at the same offset either way.
    const std::size_t n = pickles.size();
    for (std::size_t i = 0; i < n; ++i) {
        const std::string& p = pickles[i];
        pickles.push_back(p.substr(0, p.size() / 2));
        pickles.push_back(p.substr(0, p.size() - 1));
        std::string bent = p;
        bent[bent.size() / 3] = static_cast<char>(bent[bent.size() / 3] ^ 0x5a);
        pickles.push_back(bent);
    }
    int errors = 0;
    for (std::size_t i = 0; i < pickles.size(); ++i) {
        const std::string whole = pickleOutcome(pickles[i], nullptr);
        errors += whole.rfind("error", 0) == 0;
        for (std::uint32_t seed : {1u, 7u, 1234u}) {
            PieceSource source(pickles[i], seed);
            EXPECT_EQ(pickleOutcome(pickles[i], &source), whole) << "pickle " << i << ", seed " << seed;
        }
        KReducer r1, r2; // and with a reducer
        PieceSource source(pickles[i], 99);
        EXPECT_EQ(pickleOutcome(pickles[i], &source, &r1), pickleOutcome(pickles[i], nullptr, &r2)) << i;
    }
    EXPECT_GE(errors, 24); // the cut ones at least
}

TEST(PickleReader, AStreamThatEndsEarlyIsTruncatedAndAReadErrorStopsTheRead)
{
    using namespace memledger::testing;
    for (const auto& p : variedPickles())
        for (std::size_t stop : {std::size_t {0}, std::size_t {1}, p.size() / 3, p.size() - 1}) {
            PieceSource source(p, 5, stop);
            const std::string outcome = pickleOutcome(p, &source);
            EXPECT_EQ(outcome.rfind("error at ", 0), 0u) << outcome.substr(0, 80);
        }
    struct Failing : PickleSource {
        std::size_t calls = 0;
        std::size_t read(char* dst, std::size_t n) override
        {
            if (++calls > 1)
                throw std::runtime_error("disk on fire");
            const char head[] = {char(0x80), 4, ']'};
            std::size_t k = std::min(n, sizeof head);
            std::memcpy(dst, head, k);
            return k;
        }
    } failing;
    EXPECT_THROW(readPickle(failing, 1u << 20, PickleReadHooks {}), std::runtime_error);
}

TEST(PickleReader, ASnapshotFileIsReadAsItsBytesAre)
{
    // readSnapshotFile streams the file; decodeSnapshot reads the bytes held whole: the same snapshot.
    auto path = std::string("/tmp/memledger-test-stream-snap-") + std::to_string(::getpid()) + ".pickle";
    std::string cmd = "/usr/bin/python3 " MEMLEDGER_SOURCE_DIR "/bench/make_snapshot.py " + path + " --entries 20000";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Snapshot a = readSnapshotFile(path);
    Snapshot b = decodeSnapshot(bytes, path);
    std::remove(path.c_str());
    ASSERT_EQ(a.trace->size(), 20000u);
    ASSERT_EQ(a.trace->size(), b.trace->size());
    EXPECT_EQ(a.trace->time_ns, b.trace->time_ns);
    EXPECT_EQ(a.trace->bytes, b.trace->bytes);
    EXPECT_EQ(a.trace->address, b.trace->address);
    EXPECT_EQ(a.trace->action, b.trace->action);
    EXPECT_EQ(a.trace->stack, b.trace->stack);
    EXPECT_EQ(a.trace->where, b.trace->where);
    EXPECT_EQ(a.trace->stacks.stackCount(), b.trace->stacks.stackCount());
    EXPECT_EQ(a.segments.size(), b.segments.size());
    for (std::size_t i = 0; i < a.trace->size(); i += 997)
        EXPECT_EQ(a.trace_stream[i], b.trace_stream[i]);
}

namespace {

// The process's peak resident set, in bytes (VmHWM), after it was reset to the present (clear_refs 5).
std::size_t resetPeak()
{
    std::ofstream("/proc/self/clear_refs") << "5";
    return 0;
}
std::size_t peakBytes()
{
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0)
            return static_cast<std::size_t>(std::atoll(line.c_str() + 6)) * 1024;
    return 0;
}
std::size_t residentBytes()
{
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0)
            return static_cast<std::size_t>(std::atoll(line.c_str() + 6)) * 1024;
    return 0;
}

} // namespace

// LONG_BINPUT names a memo slot far past those used: Python's pickler never writes one, a hostile file may. It
// is read (the value comes back through LONG_BINGET) without a memo of the index's size (8 bytes a slot: 480 MB
// here for a 64 MB file).
TEST(PickleReader, AFarMemoIndexTakesNoMemoryOfItsSize)
{
    const std::uint32_t far = 60000000;
    std::string p = bytes({0x80, 4, 'B'}) + u32(64u << 20) + std::string(64u << 20, 'x') + bytes({'K', 7, 'r'})
        + u32(far) + "j" + u32(far) + bytes({0x87, '.'});
    resetPeak();
    const std::size_t before = residentBytes();
    PickleDocument doc = readPickle(std::move(p));
    const std::size_t grown = peakBytes() - std::min(peakBytes(), before);
    ASSERT_EQ(doc.root().items().size(), 3u);
    EXPECT_EQ(doc.root().items()[1].asInt(), 7);
    EXPECT_EQ(doc.root().items()[2].asInt(), 7);
    EXPECT_LT(grown, std::size_t {100} << 20) << "the peak grew by " << grown << " bytes";
    // A get of a slot never stored, near or far, is an error naming it.
    const std::string pad = bytes({0x80, 4, 'B'}) + u32(100000) + std::string(100000, 'x') + "0";
    EXPECT_NE(errorText(pad + bytes({'K', 1, 'r'}) + u32(90000) + "j" + u32(89999) + ".")
                  .find("memo index 89999 was never stored"),
        std::string::npos);
    EXPECT_NE(errorText(pad + bytes({'K', 1, 'q', 3, 'h', 2, '.'})).find("memo index 2 was never stored"),
        std::string::npos);
}

// The depth limit holds a container to the depth it had when it was put into another: growing it afterwards
// (a memo get or DUP of it, then APPEND) would nest without limit or make a cycle. Both are refused: a clear
// error, and through the snapshot decoder a FileError naming the file (the CLI's exit 3).
TEST(PickleReader, ANestedContainerNeverGrowsPastTheDepthLimit)
{
    // [] DUP APPEND: a list inside itself.
    EXPECT_NE(errorText(bytes({0x80, 2, ']', '2', 'a', '.'})).find("a container put inside itself"),
        std::string::npos);
    // A = [], memoized; 999 tuples around it (1000 levels, the limit); then a chain of 999 lists appended to A
    // through the memo: 1999 levels if it were taken.
    std::string deep = bytes({0x80, 4, ']', 0x94}) + std::string(999, static_cast<char>(0x85)) + bytes({'h', 0})
        + std::string(999, ']') + std::string(998, 'a') + "a" + "0" + ".";
    EXPECT_NE(errorText(deep).find("APPEND on a list already inside another container"), std::string::npos)
        << errorText(deep);
    // The same with SETITEM on a dict; and the plain way (the child complete before its parent takes it) reads.
    std::string dict = bytes({0x80, 4, '}', 0x94, 0x85, 'h', 0, 'K', 1, ']', 's', '.'});
    EXPECT_NE(errorText(dict).find("SETITEM on a dict already inside another container"), std::string::npos);
    EXPECT_NO_THROW(readPickle(bytes({0x80, 2, ']', '2', ']', 'a', '0', '.'})));
    for (const auto& data : {bytes({0x80, 2, ']', '2', 'a', '.'}), deep}) {
        try {
            decodeSnapshot(data, "cycle.pickle");
            ADD_FAILURE() << "no error";
        } catch (const FileError& e) {
            EXPECT_EQ(e.path(), "cycle.pickle");
            EXPECT_NE(std::string(e.what()).find("damaged or unsafe pickle"), std::string::npos) << e.what();
        }
    }
}
