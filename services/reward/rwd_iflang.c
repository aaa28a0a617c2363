/*
 * rwd_iflang: script, then function words and distinctive letters. See
 * rwd_iflang.h for why and how far it agrees with langdetect.
 */
#include "rwd_iflang.h"

#include "rwd_iftext.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    S_LATIN,
    S_CYRILLIC,
    S_ARABIC,
    S_DEVANAGARI,
    S_BENGALI,
    S_GURMUKHI,
    S_GUJARATI,
    S_TAMIL,
    S_TELUGU,
    S_KANNADA,
    S_MALAYALAM,
    S_THAI,
    S_HEBREW,
    S_HANGUL,
    S_KANA,
    S_HAN,
    S_GREEK,
    S_NSCRIPT
} s_script_t;

static const struct {
    uint32_t lo, hi;
    s_script_t script;
} s_ranges[] = {
    {'A', 'Z', S_LATIN},         {'a', 'z', S_LATIN},
    {0xC0, 0x24F, S_LATIN},      {0x1E00, 0x1EFF, S_LATIN},
    {0x370, 0x3FF, S_GREEK},     {0x400, 0x4FF, S_CYRILLIC},
    {0x590, 0x5FF, S_HEBREW},    {0x600, 0x6FF, S_ARABIC},
    {0x750, 0x77F, S_ARABIC},    {0xFB50, 0xFDFF, S_ARABIC},
    {0xFE70, 0xFEFF, S_ARABIC},  {0x900, 0x97F, S_DEVANAGARI},
    {0x980, 0x9FF, S_BENGALI},   {0xA00, 0xA7F, S_GURMUKHI},
    {0xA80, 0xAFF, S_GUJARATI},  {0xB80, 0xBFF, S_TAMIL},
    {0xC00, 0xC7F, S_TELUGU},    {0xC80, 0xCFF, S_KANNADA},
    {0xD00, 0xD7F, S_MALAYALAM}, {0xE00, 0xE7F, S_THAI},
    {0x1100, 0x11FF, S_HANGUL},  {0x3130, 0x318F, S_HANGUL},
    {0xAC00, 0xD7AF, S_HANGUL},  {0x3040, 0x30FF, S_KANA},
    {0x3400, 0x4DBF, S_HAN},     {0x4E00, 0x9FFF, S_HAN},
};

/* The language of a script only one language in langdetect's set uses. */
static const char *const s_script_lang[S_NSCRIPT] = {
    [S_BENGALI] = "bn",   [S_GURMUKHI] = "pa", [S_GUJARATI] = "gu",
    [S_TAMIL] = "ta",     [S_TELUGU] = "te",   [S_KANNADA] = "kn",
    [S_MALAYALAM] = "ml", [S_THAI] = "th",     [S_HEBREW] = "he",
    [S_HANGUL] = "ko",    [S_KANA] = "ja",     [S_HAN] = "zh-cn",
    [S_GREEK] = "el",
};

/* A language of a shared script: its most frequent function words (space
 * separated, lower case, with a space at both ends) and letters rare in
 * the script's other languages. Earlier rows win ties. */
typedef struct {
    const char *code;
    s_script_t script;
    const char *words;
    const char *marks;
} s_lang_t;

static const s_lang_t s_langs[] = {
    {"en", S_LATIN,
     " the and of that is for with was are this you have from they which "
     "will their there been would what about if more when your our also how "
     "these into than then its it not be by on we has his her she can or "
     "but at all my as were who should could an to in i ",
     ""},
    {"es", S_LATIN,
     " el los las del que y en un una es por con para se al lo como más "
     "pero sus su ya este esta son muy también fue ha hay sobre entre "
     "cuando todo tiene puede ser sin desde porque nos yo mi la de no ",
     "ñ¿¡"},
    {"pt", S_LATIN,
     " o os as do da dos das em um uma é não para com por mais como mas ao "
     "se na no nos seu sua foi são muito também ele ela isso está pelo "
     "pela ou quando já tem há entre sobre você eu então porque e de que ",
     "ãõç"},
    {"fr", S_LATIN,
     " le la les des du et un une est en que qui dans pour pas sur au aux "
     "ce il elle avec plus par ne se sont mais ou son sa ses cette nous "
     "vous je été être aussi comme leur très à l d qu c n s j de ",
     "èêàçœù"},
    {"de", S_LATIN,
     " der die das und ist nicht ein eine zu den dem des mit von sich auf "
     "für im es sie er wir ich auch wird sind war aus bei nach wie oder "
     "aber noch nur kann dass werden einer einem eines über wenn hat haben "
     "ein ",
     "ßü"},
    {"it", S_LATIN,
     " il lo la gli le di che e è un una per non con del della dei delle "
     "nel nella al alla sono si da come anche ma più questo questa ha "
     "essere molto suo sua loro se ci mi ti dal degli sul ",
     "ìò"},
    {"pl", S_LATIN,
     " i w z na się nie do to jest że o a jak ale po co tak za od są przez "
     "dla by być jego jej ich który która które może już tylko bardzo oraz "
     "czy ten ta te ",
     "łąęśźżćń"},
    {"vi", S_LATIN,
     " và của là có không các những một được trong cho với người này đã "
     "để khi thì như cũng rất từ đến tôi chúng nhiều về ra sẽ làm năm nó ",
     "ươđạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ"},
    {"sw", S_LATIN,
     " na ya wa kwa ni za la katika kuwa hii cha vya yake lakini au pia "
     "kama sana hiyo wake watu kwamba huo hilo hata baada mimi wewe yeye "
     "sisi ana nina tu ",
     ""},
    {"fi", S_LATIN,
     " ja on ei että se oli hän ovat mutta kun tai myös joka olla niin "
     "kuin mitä sen hänen me te he minä sinä tämä tässä siitä jos vain "
     "kanssa mukaan voi nyt jo sekä ole ",
     ""},
    {"nl", S_LATIN,
     " de het een en van is dat op te in niet zijn voor met die er aan ook "
     "als bij maar om door wordt heeft naar dan nog wel worden kan hij zij "
     "wij ik deze dit zo ",
     ""},
    {"sv", S_LATIN,
     " och att det som en på är av för med till den har inte om ett var "
     "jag han hon de vi men sig från så kan eller när vid också efter ",
     "å"},
    {"da", S_LATIN,
     " og at det er en til på af for med den som har ikke de et jeg han "
     "hun vi men fra så kan eller når også efter være var sig blev ",
     "æø"},
    {"no", S_LATIN,
     " og i det er som på en til av for med den har ikke de et jeg han hun "
     "vi men fra så kan eller når også etter være var seg ble ",
     "æø"},
    {"ro", S_LATIN,
     " și de în la cu a pe care că nu este un o din pentru sunt mai se sau "
     "dar fost al ale lui ei acest această foarte ",
     "șțăâî"},
    {"ca", S_LATIN,
     " el la els les de i que en un una és per amb del no es al com més "
     "però va seu seva dels aquest aquesta també són hi ho ",
     ""},
    {"id", S_LATIN,
     " dan yang di ini itu dengan untuk tidak dari dalam akan pada adalah "
     "ke juga saya kami mereka ada bisa atau oleh sudah karena lebih "
     "seperti ",
     ""},
    {"tr", S_LATIN,
     " ve bir bu da de için ile çok ne daha gibi olarak ama o en var ben "
     "sen biz onlar değil olan kadar sonra her ",
     "ğış"},
    {"cs", S_LATIN,
     " a se na je v že to s z do o jako ale by jsou není tak pro jeho "
     "které který která být také ",
     "řěů"},
    {"ru", S_CYRILLIC,
     " что это как он она они был была было были его её все так же уже "
     "ещё еще или если только когда очень мы вы их для к у из с этот "
     "который которые может нет бы быть и в не на по но ",
     "ыэё"},
    {"uk", S_CYRILLIC,
     " що це як він вона вони був була було були його її все так вже ще "
     "або якщо тільки коли дуже ми ви їх для до від з і та є який які "
     "може немає би бути у в не на по але ",
     "іїєґ"},
    {"bg", S_CYRILLIC,
     " че това като този тази те той тя са е се да от за със към ще беше "
     "бъде има няма още вече или ако само когато много ли му го я си ни и "
     "в не на по но ",
     ""},
    {"ar", S_ARABIC,
     " في من على إلى أن هذا هذه التي الذي عن مع كان لا ما هو هي كل بين "
     "قد ذلك أو ",
     "ةيك"},
    {"fa", S_ARABIC, " از به در که این را با است می برای آن یک شده بود هم تا ",
     "پچژگیک"},
    {"ur", S_ARABIC,
     " کے کی کا میں ہے اور سے کو نہیں یہ ہیں تھا کہ پر بھی ایک ",
     "ےںٹڈڑہھپچگیک"},
    {"hi", S_DEVANAGARI,
     " है हैं के की का में और से को नहीं यह एक पर भी था थे थी लिए कि जो "
     "हम आप वह तो कर गया किया होता करने ",
     ""},
    {"mr", S_DEVANAGARI,
     " आहे आहेत आणि या हे ते होते मध्ये त्या केले करण्यात नाही आम्ही "
     "तुम्ही म्हणून व पण होता त्यांनी ",
     "ळ"},
    {"ne", S_DEVANAGARI,
     " छ छन् हो र मा ले गर्न भएको पनि यो त्यो गरेको हुन्छ थियो छैन तर "
     "हामी तपाईं म लागि भने ",
     ""},
};

#define S_NLANG      (sizeof s_langs / sizeof s_langs[0])
#define S_WORD_BYTES 64u

static s_script_t
s_script(uint32_t cp)
{
    for (size_t i = 0; i < sizeof s_ranges / sizeof s_ranges[0]; i++)
        if (cp >= s_ranges[i].lo && cp <= s_ranges[i].hi)
            return s_ranges[i].script;
    return S_NSCRIPT;
}

/* Whether the UTF-8 list holds cp. */
static bool
s_has_cp(const char *list, uint32_t cp)
{
    size_t n = strlen(list), len;
    for (size_t i = 0; i < n; i += len)
        if (rwd_iftext_cp(list, n, i, &len) == cp)
            return true;
    return false;
}

/* Scores one lower-cased word (w[0..wl)) against every language. */
static void
s_score_word(const char *w, size_t wl, double *score)
{
    char key[S_WORD_BYTES + 3];
    key[0] = ' ';
    memcpy(key + 1, w, wl);
    key[wl + 1] = ' ';
    key[wl + 2] = '\0';
    for (size_t k = 0; k < S_NLANG; k++)
        if (strstr(s_langs[k].words, key))
            score[k] += 1.0;
}

static size_t
s_put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char) cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char) (0xC0 | (cp >> 6));
        o[1] = (char) (0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char) (0xE0 | (cp >> 12));
        o[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char) (0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char) (0xF0 | (cp >> 18));
    o[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char) (0x80 | (cp & 0x3F));
    return 4;
}

const char *
rwd_iflang_detect(const char *s, size_t n)
{
    size_t letters[S_NSCRIPT + 1] = {0}, words = 0, wl = 0, len;
    double score[S_NLANG] = {0};
    char w[S_WORD_BYTES];
    bool too_long = false;
    for (size_t i = 0; i <= n && words < RWD_IFLANG_MAX_WORDS; i += len) {
        uint32_t cp = i < n ? rwd_iftext_cp(s, n, i, &len) : ' ';
        if (i == n)
            len = 1;
        bool letter =
            rwd_iftext_is_word(cp) && !(cp < 0x80 && !isalpha((int) cp));
        if (!letter) {
            if (wl > 0 && !too_long)
                s_score_word(w, wl, score);
            words += wl > 0;
            wl = 0;
            too_long = false;
            continue;
        }
        s_script_t sc = s_script(cp);
        letters[sc]++;
        uint32_t lo = rwd_iftext_lower(cp);
        for (size_t k = 0; sc != S_NSCRIPT && k < S_NLANG; k++)
            if (s_langs[k].script == sc && s_has_cp(s_langs[k].marks, lo))
                score[k] += 0.5;
        if (wl + 4 > S_WORD_BYTES)
            too_long = true;
        else
            wl += s_put_utf8(w + wl, lo);
    }
    size_t total = 0;
    s_script_t best = S_LATIN;
    for (int sc = 0; sc <= S_NSCRIPT; sc++)
        total += letters[sc];
    if (total == 0)
        return NULL;
    for (int sc = 0; sc < S_NSCRIPT; sc++)
        if (letters[sc] > letters[best])
            best = (s_script_t) sc;
    if (letters[best] == 0)
        return "unknown";
    /* Japanese mixes kana and kanji; kanji alone read as Chinese. */
    if (best == S_HAN || best == S_KANA) {
        size_t cjk = letters[S_HAN] + letters[S_KANA];
        return letters[S_KANA] * 20 >= cjk ? "ja" : "zh-cn";
    }
    if (s_script_lang[best])
        return s_script_lang[best];
    const char *code = NULL;
    double top = -1;
    for (size_t k = 0; k < S_NLANG; k++)
        if (s_langs[k].script == best && score[k] > top) {
            top = score[k];
            code = s_langs[k].code;
        }
    return code;
}
