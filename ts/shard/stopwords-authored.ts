/**
 * Stopword lists written for Quiver, for the three languages of the contract that no
 * package has a list for: Azerbaijani (Latin script), Tajik (Cyrillic script) and
 * Hinglish (Hindi as written in Latin letters in chat, mixed with English). Each is a
 * list of the language's function words, written from a description of its grammar:
 * personal, reflexive and demonstrative pronouns with their common case forms,
 * question words, conjunctions, postpositions or prepositions, particles, the copula
 * and common auxiliary forms, quantifiers and adverbs of degree, time and place. They
 * are not the reference's lists (its lists for these languages were not consulted) and
 * differ from them.
 *
 * Every word is lowercase and one token of the `word` tokenizer (letters only: no
 * apostrophe, hyphen or space), which text-index.test.ts checks; a function word of
 * two words is listed as its two words when both are function words. Hinglish adds the
 * English list (stopwords-english.ts) to the romanized Hindi words, as text is mixed;
 * common chat spellings of one word are all listed ("nahi", "nahin", "nhi").
 *
 * Owns: the three authored lists. Must never: tokenize.
 */

function words(text: string): readonly string[] {
  return text.split(/\s+/).filter((w) => w.length > 0);
}

/** Azerbaijani, Latin script (ə, ı, ğ, ş, ç, ö, ü). */
export const AZERBAIJANI_STOPWORDS: readonly string[] = words(`
  mən məni mənim mənə məndə məndən
  sən səni sənin sənə səndə səndən
  o onu onun ona onda ondan
  biz bizi bizim bizə bizdə bizdən
  siz sizi sizin sizə sizdə sizdən
  onlar onları onların onlara onlarda onlardan
  öz özü özüm özün özümüz özünüz özləri özünə özünü özünün özümə özlərini
  bu bunu bunun buna bunda bundan bunlar bunları bunların bunlara bunlarda bunlardan
  həmin belə elə
  bura burada buradan buraya ora orada oradan oraya
  kim kimi kimin kimə kimdə kimdən kimlər
  nə nəyi nəyin nəyə nədə nədən niyə
  haçan hara harada haradan haraya necə neçə hansı hansını hansının
  və ya yaxud yoxsa amma ancaq lakin fəqət çünki ki əgər həm həmçinin habelə hətta
  yəni halbuki isə da də gərək
  üçün ilə qədər sonra əvvəl qabaq görə başqa savayı doğru tərəf tərəfindən haqqında
  barədə üzrə üstündə altında içində arasında yanında qarşı qarşısında ötrü əvəzinə dək
  bəri etibarən sarı boyu zamanı vasitəsilə
  mi mı mu mü bəs axı hə bəli xeyr yox deyil yalnız təkcə sadəcə lap ən çox az daha
  artıq hələ indi həmişə heç hər hamı hamısı bütün bəzi bəzən bir biri birisi digər
  eyni tez yenə yenidən bəlkə olduqca tamamilə
  idi idim idin idik idiniz idilər imiş ikən var
  olan olar olub olur oldu olmuş olacaq olaraq olsun olmaq olmayan
  edir edən etdi etmək edib edəcək
`);

/** Tajik, Cyrillic script (ӣ, ӯ, қ, ғ, ҳ, ҷ). */
export const TAJIK_STOPWORDS: readonly string[] = words(`
  ман маро ту туро вай вайро ӯ ӯро мо моро шумо шуморо онҳо онҳоро вайҳо инҳо инҳоро
  худ худро худам худат худаш худамон худатон худашон ҳамдигар якдигар
  ин инро он онро ҳамин ҳаминро ҳамон ҳамонро чунин чунон инак ана мана
  инҷо онҷо ҳаминҷо ҳамонҷо тавр хел
  кӣ киро чӣ чиро чаро кай куҷо чанд чандум кадом оё магар чун
  ва ё вале аммо лекин валекин балки зеро чунки агар ки ҳам на то гарчанде гарчи
  ҳарчанд пас баъд ҳатто бинобар бинобарин хоҳ вагарна чунончи яъне инчунин ҳамчунин
  ҳамчун мисли монанди гӯё
  ба аз дар бо барои бе бар сӯи назди пеши баъди пеш зери болои рӯи дохили берун
  байни миёни ғайр ғайри зидди тибқи оид доир бораи ҷуз қариб наздик тарафи ҳамроҳи
  баробари воситаи барин
  низ не ҳа бале оре фақат танҳо ҳанӯз аллакай боз дигар ку шояд албатта кошки
  ҳар ҳама ҳамаи ҳамаро ҳамааш ҳеҷ касе ягон баъзе баъзан як яке бисёр хеле кам зиёд
  тамоман беш бештар камтар чандон
  ҳоло акнун пештар ҳамеша ҳаргиз гоҳо зуд вақте аввал сипас баъдан ниҳоят
  аст ҳаст ҳастам ҳастӣ ҳастем ҳастед ҳастанд нест нестам нестӣ нестем нестед нестанд
  буд будам будӣ будем будед буданд будан будааст
  шуд шудам шуданд шудааст шуда шудан мешавад мешаванд мешавам шавад шаванд
  бошад бошанд бошам бошем бошед бошӣ мебошад мебошанд мебошам
  кард карда кардан мекунад мекунанд мекунам кунад
  хоҳад хоҳам хоҳанд хоҳем метавонад метавонанд тавонад бояд набояд
`);

/** Hinglish: romanized Hindi function words, with common chat spellings (the English list is added by text-languages.ts). */
export const HINGLISH_ROMANIZED_STOPWORDS: readonly string[] = words(`
  main mai mein me mujhe mujhko mujhse mera meri mere
  hum ham humein hume hamein hame humko hamko humse hamse
  hamara hamari hamare humara humari humare
  tu tum tumhe tumhein tumko tumse tumhara tumhari tumhare tera teri tere tujhe tujhko tujhse
  aap ap aapko apko aapse apse aapka aapki aapke apka apki apke
  woh wo vo voh vah yeh ye yah
  is us in un iss uss isko usko ise iska iski iske uska uski uske inka inki inke unka unki unke
  inhe inhein unhe unhein inko unko isme ismein usme usmein isse usse inse unse
  apna apni apne khud
  koi kuch kuchh kisi kis kisko kiska kiski kiske kise
  kaun kon kaunsa konsa kya kyaa kyu kyun kyon kaise kaisa kaisi kab kahan kaha kidhar
  kitna kitni kitne
  jo jis jise jisko jiska jiski jiske jinka jinki jinke jinhe jinko
  jab jaha jahan jaise jaisa jaisi jitna jitni jitne
  sab sabhi sabko sabka sabki sabke sabse
  ne ka ki ke ko se par pe tak wala wali wale waala waali waale vala vali vale
  liye lie saath sath bina baad pehle pahle upar neeche niche andar bahar paas taraf tarah
  bare baare dwara
  aur ya lekin magar kyunki kyuki kyonki kyoki agar to toh tab phir fir isliye isiliye
  varna warna balki bhi na
  hai h hain hein ho hoon hu hun tha thi the thaa hota hoti hote hua hui hue
  raha rahi rahe rha rhi rhe gaya gayi gai gaye gye hoga hogi honge hona hone hokar
  kar karo karna karne karke kr krna diya di de dena liya lena sakta sakti sakte
  chahiye chahie chaiye
  nahi nahin nhi nai mat hi ji haan han ha acha accha achha bas sirf
  yahan yaha yahi wahan waha wahi idhar udhar ab abhi kabhi hamesha
  bahut bohot bahot bht zyada jyada thoda thodi thode bilkul
  aisa aisi aise waisa waisi waise vaise itna itni itne utna utni utne
`);
