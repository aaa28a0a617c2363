/*
 * rwd_iflang: the language of running text by script, function words and
 * distinctive letters; no letters is no answer; bounded work.
 */
#include "lisa/lisa_mem.h"
#include "rwd_iflang.h"

#include <criterion/criterion.h>
#include <string.h>

static const char *
detect(const char *s)
{
    return rwd_iflang_detect(s, strlen(s));
}

Test(rwd_iflang, usage)
{
    const char *en = "The weather is nice today and we are going to the park.";
    cr_assert_str_eq(rwd_iflang_detect(en, strlen(en)), "en");
    cr_assert_null(rwd_iflang_detect("42 -- 7!", 8)); /* no features */
}

Test(rwd_iflang, languages)
{
    static const struct {
        const char *text;
        const char *code;
    } rows[] = {
        {"El perro de mi vecino es muy grande y le gusta correr por el "
         "parque.",
         "es"},
        {"O cachorro do meu vizinho é muito grande e gosta de correr no "
         "parque.",
         "pt"},
        {"Le chien de mon voisin est très grand et il aime courir dans le "
         "parc.",
         "fr"},
        {"Der Hund meines Nachbarn ist sehr groß und läuft gern im Park.",
         "de"},
        {"Il cane del mio vicino è molto grande e gli piace correre nel "
         "parco.",
         "it"},
        {"Pies mojego sąsiada jest bardzo duży i lubi biegać po parku.", "pl"},
        {"Con chó của hàng xóm tôi rất to và nó thích chạy trong công viên.",
         "vi"},
        {"Собака моего соседа очень большая, и она любит бегать в парке.",
         "ru"},
        {"Собака мого сусіда дуже велика, і вона любить бігати в парку.", "uk"},
        {"Кучето на моя съсед е много голямо и обича да тича в парка.", "bg"},
        {"كلب جاري كبير جدا ويحب الركض في الحديقة.", "ar"},
        {"سگ همسایه من خیلی بزرگ است و دوست دارد در پارک بدود.", "fa"},
        {"میرے پڑوسی کا کتا بہت بڑا ہے اور اسے پارک میں دوڑنا پسند ہے۔", "ur"},
        {"मेरे पड़ोसी का कुत्ता बहुत बड़ा है और उसे पार्क में दौड़ना पसंद है।", "hi"},
        {"माझ्या शेजाऱ्याचा कुत्रा खूप मोठा आहे आणि त्याला बागेत धावायला "
         "आवडते.",
         "mr"},
        {"मेरो छिमेकीको कुकुर धेरै ठूलो छ र यसलाई पार्कमा दौडन मन पर्छ।", "ne"},
        {"私の隣人の犬はとても大きくて、公園で走るのが好きです。", "ja"},
        {"我邻居的狗很大，喜欢在公园里跑。", "zh-cn"},
        {"내 이웃의 개는 매우 크고 공원에서 뛰는 것을 좋아합니다.", "ko"},
        {"สุนัขของเพื่อนบ้านตัวใหญ่มากและชอบวิ่งในสวน", "th"},
        {"הכלב של השכן שלי גדול מאוד והוא אוהב לרוץ בפארק.", "he"},
        {"এই কুকুরটি খুব বড় এবং পার্কে দৌড়াতে ভালোবাসে।", "bn"},
        {"Mbwa wa jirani yangu ni mkubwa sana na anapenda kukimbia katika "
         "bustani.",
         "sw"},
        {"Naapurini koira on todella iso ja se juoksee mielellään puistossa "
         "kun on aikaa.",
         "fi"},
        /* capitals read as words */
        {"THE WEATHER IS NICE TODAY AND WE ARE GOING TO THE PARK.", "en"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *got = detect(rows[i].text);
        cr_expect(got && strcmp(got, rows[i].code) == 0, "%s: got %s",
                  rows[i].code, got ? got : "(null)");
    }
}

Test(rwd_iflang, bounded)
{
    /* a megabyte: only the first words count */
    size_t n = 1u << 20;
    char *big = lisa_malloc(n);
    static const char piece[] = "und das ist der Hund ";
    for (size_t i = 0; i < n; i++)
        big[i] = piece[i % (sizeof piece - 1)];
    cr_expect_str_eq(rwd_iflang_detect(big, n), "de");
    memset(big, ' ', n);
    cr_expect_null(rwd_iflang_detect(big, n));
    lisa_free(&big);
}
